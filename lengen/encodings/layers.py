"""Per-layer encodings (`ModelConfig.layer_pe`): a pattern of encoding names repeated over the
layers, e.g. ["rope", "rope", "rope", "none"] = RoPE with every fourth layer NoPE.

Sources: Llama 4's `no_rope_layers` (HF `configuration_llama4.py`: layer l is NoPE iff
(l + 1) % no_rope_layer_interval == 0, interval 4, so NoPE at l = 3, 7, 11, ...; the pattern
"rope,rope,rope,none" gives exactly that), SmolLM3 (the same list, interval 4) and RNoPE ("Rope to
Nope and back again", arXiv 2501.18795: RoPE layers interleaved with one NoPE layer in 4). Llama 4's
chunked attention on RoPE layers and Cohere2's sliding window are not part of this: every layer
attends to all its keys; the encoding is what differs.

`LayerPatternEncoding` is one PositionalEncoding that holds one instance per distinct name and
sends each layer's hooks to that layer's instance, so every user of the model's encoding (the
sampler and position checks, the stack of models trained together, the decoder's KV cache) sees
one encoding as before. The model's `pe` gets `pe_options`; the other names are built with their
defaults. An encoding with per-layer parameters (fire, kerple, t5, relative) keeps its table for
every layer index, and layers of other encodings leave their rows unused: the layer index that
reaches an encoding is the model's. Absolute encodings (an `embed` hook: sincos, learned) act once
on the embeddings, not in a layer, and are refused in a pattern."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lengen.encodings.base import PositionalEncoding
from lengen.errors import LengenError


def is_absolute(cls) -> bool:
    """Whether an encoding class adds an absolute signal to the embeddings (its own `embed`)."""
    return cls.embed is not PositionalEncoding.embed


class LayerPatternEncoding(PositionalEncoding):
    """`encodings[name]` for each distinct name of cfg.layer_pe; layer l uses cfg.layer_encoding(l)."""

    def __init__(self, cfg, built: dict[str, PositionalEncoding]):
        super().__init__(cfg)
        self.pattern = list(cfg.layer_pe)
        self.encodings = nn.ModuleDict(built)
        self.relative = all(e.relative for e in built.values())
        self.accepts_float_positions = all(e.accepts_float_positions for e in built.values())

    @property
    def name(self) -> str:
        return ",".join(self.pattern)

    def for_layer(self, layer: int) -> PositionalEncoding:
        return self.encodings[self.cfg.layer_encoding(layer)]

    @property
    def bounds(self) -> dict:  # as parameter paths below this module ("encodings.kerple_log.r1")
        return {f"encodings.{n}.{p}": b for n, e in self.encodings.items() for p, b in e.bounds.items()}

    def project(self) -> None:
        for e in self.encodings.values():
            e.project()

    @property
    def position_table_size(self) -> int | None:
        sizes = [e.position_table_size for e in self.encodings.values() if e.position_table_size is not None]
        return min(sizes) if sizes else None

    def check_sampler(self, sampler) -> None:
        for e in self.encodings.values():
            e.check_sampler(sampler)

    def check_positions(self, pos: torch.Tensor) -> None:
        for e in self.encodings.values():
            e.check_positions(pos)

    def prepare(self, pos_q, pos_k) -> dict[str, Any]:
        return {n: e.prepare(pos_q, pos_k) for n, e in self.encodings.items()}

    def transform_qk(self, layer, state, q, k):
        name = self.cfg.layer_encoding(layer)
        return self.encodings[name].transform_qk(layer, None if state is None else state[name], q, k)

    def bias(self, layer, state):
        name = self.cfg.layer_encoding(layer)
        return self.encodings[name].bias(layer, None if state is None else state[name])

    def qk_bias(self, layer, state, q, k, scale, causal):
        name = self.cfg.layer_encoding(layer)
        return self.encodings[name].qk_bias(layer, None if state is None else state[name], q, k, scale, causal)


def build_pattern(cfg, build_one) -> LayerPatternEncoding:
    """The LayerPatternEncoding of cfg.layer_pe; `build_one(name, options)` builds one encoding
    (lengen.encodings.build_encoding's registry lookup). LengenError for an absolute encoding."""
    built = {}
    for name in dict.fromkeys(cfg.layer_pe):
        enc = build_one(name, cfg.pe_options if name == cfg.pe else {})
        if is_absolute(type(enc)):
            raise LengenError(f"layer-pe: {name!r} is an absolute encoding (added once to the embeddings, not in a "
                              "layer) and cannot be chosen per layer; use it as --pe without --layer-pe")
        built[name] = enc
    return LayerPatternEncoding(cfg, built)
