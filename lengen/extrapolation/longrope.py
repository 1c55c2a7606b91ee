"""LongRoPE frequencies (Ding et al. 2024) as transformers' rope_type "longrope" defines them
(Phi-3 / Phi-3.5 configs, the former "su"): per-dimension rescale factors, one list for short and
one for long sequences.

With d the rotary dim, b the base, L0 the original length (`train_length`), i = 0 .. d/2 - 1:
    ext = long_factor   if seq_len > L0   else short_factor     (seq_len = max(position) + 1)
    inv_freq_i = 1 / (ext_i * b^(2i/d))
    attention factor = attention_factor if given,
                       else sqrt(1 + ln(factor) / ln(L0)) if factor > 1, else 1
It multiplies cos and sin (logits x its square), at every length (short inputs too), as in HF.
transformers defaults `factor` to max_position_embeddings / original_max_position_embeddings; here
there is no second length, so `factor` defaults to 1 (attention factor 1): give `factor` (or
`attention_factor`). lengen.hf.extend fills all of them from a longrope config.

Options: short_factor, long_factor (d/2 numbers each: a list, or in a spec string separated by
"/", e.g. `longrope:short_factor=1/1/1.2/1.5,long_factor=1/2/4/8,factor=4,train_length=32`),
factor, attention_factor; L0 is `train_length`. Both lists are required.

Length-dependent (the switch at L0): a post-RoPE KV cache would mix the two tables, lengen's cache
holds un-rotated keys (see lengen.extrapolation.cache).
"""

from __future__ import annotations

import math

import torch

from lengen.extrapolation.base import ExtrapolationMethod


def factor_list(value, name: str) -> list[float]:
    if value is None:
        raise ValueError(f"{name} is required (d/2 numbers)")
    if isinstance(value, (int, float)):
        items = [value]
    elif isinstance(value, str):
        items = [x for x in value.replace(";", "/").replace(" ", "/").split("/") if x]
    else:
        items = list(value)
    out = [float(x) for x in items]
    if not out or any(not x > 0 for x in out):
        raise ValueError(f"{name} must be positive numbers, got {value!r}")
    return out


class LongRope(ExtrapolationMethod):
    name = "longrope"
    length_dependent = True

    def __init__(self, rope, short_factor=None, long_factor=None, factor: float | None = None,
                 attention_factor: float | None = None):
        super().__init__(rope)
        self.short_factor = factor_list(short_factor, "short_factor")
        self.long_factor = factor_list(long_factor, "long_factor")
        half = rope.rotary_dim // 2
        for name, values in (("short_factor", self.short_factor), ("long_factor", self.long_factor)):
            if len(values) != half:
                raise ValueError(f"{name} has {len(values)} entries, the rotary dim {rope.rotary_dim} "
                                 f"needs {half}")
        self.factor = 1.0 if factor is None else float(factor)
        if attention_factor is not None:
            self.attention_factor = float(attention_factor)
        elif self.factor > 1:
            self.attention_factor = math.sqrt(1 + math.log(self.factor) / math.log(rope.train_length))
        else:
            self.attention_factor = 1.0

    def rope_params(self, seq_len, device=None):
        d, b = self.rope.rotary_dim, self.rope.base
        ext = self.long_factor if seq_len and seq_len > self.rope.train_length else self.short_factor
        ext = torch.tensor(ext, dtype=torch.float32)
        inv_freq = 1.0 / (ext * b ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        return inv_freq.to(device), self.attention_factor
