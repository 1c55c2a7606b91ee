"""A causal decoder LM: token embedding -> pre-LN Transformer blocks (any registered encoding) ->
vocabulary logits. Supports a KV cache and, for RoPE models, training-free extrapolation methods
(lengen.extrapolation) at evaluation time."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from lengen.encodings.layers import LayerPatternEncoding
from lengen.encodings.none import NoEncoding
from lengen.errors import LengenError
from lengen.extrapolation.base import RopeSpec
from lengen.lm.cache import DecoderCache
from lengen.models.config import ModelConfig
from lengen.models.transformer import Transformer
from lengen.protocols.scoring import nll_from_logits


def pe_description(cfg: ModelConfig) -> str:
    """pe='rope', or the per-layer pattern, for messages."""
    if cfg.layer_pe:
        return (f"layer-pe {','.join(cfg.layer_pe)} (RoPE methods need RoPE layers mixed only with NoPE "
                "layers, none)")
    return f"pe={cfg.pe!r}"


class DecoderLM(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        if not cfg.causal:
            raise LengenError("a decoder LM needs causal=True in its model config")
        self.cfg, self.vocab_size = cfg, vocab_size
        self.embed = nn.Embedding(vocab_size, cfg.d_model)
        self.decoder = Transformer(cfg)  # the CHE model's stack, causal, with a KV cache and methods
        self.head = nn.Linear(cfg.d_model, vocab_size, bias=False)
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.embed_scale else 1.0
        self._init_weights()

    def _init_weights(self) -> None:
        """GPT-2 style: N(0, 0.02), residual projections scaled by 1/sqrt(2 layers). The
        encoding's own parameters keep their initialisation."""
        std = 0.02
        nn.init.normal_(self.embed.weight, std=std)
        nn.init.normal_(self.head.weight, std=std)
        for block in self.decoder.blocks:
            nn.init.normal_(block.attn.qkv.weight, std=std)
            nn.init.normal_(block.attn.out.weight, std=std / math.sqrt(2 * self.cfg.num_layers))
            for lin, s in ((block.ff[0], std), (block.ff[2], std / math.sqrt(2 * self.cfg.num_layers))):
                nn.init.normal_(lin.weight, std=s)
                nn.init.zeros_(lin.bias)

    # -- RoPE methods ---------------------------------------------------------------------------
    @property
    def rope_encoding(self):
        """The RoPE encoding (PositionalEncoding.rotary) extrapolation methods act on: the
        model's, or that of a per-layer pattern whose other layers are NoPE (a method changes RoPE
        layers only, as Llama 4's rope scaling leaves its NoPE layers alone); None for any other
        model."""
        pe = self.decoder.pe
        if isinstance(pe, LayerPatternEncoding):
            ropes = [e for e in pe.encodings.values() if e.rotary]
            others = [e for e in pe.encodings.values() if not e.rotary and not isinstance(e, NoEncoding)]
            return ropes[0] if len(ropes) == 1 and not others else None
        return pe if pe.rotary else None

    @property
    def is_rope(self) -> bool:
        return self.rope_encoding is not None

    def rope_spec(self):
        """The RopeSpec extrapolation methods are built from, or None for a non-RoPE model."""
        if not self.is_rope:
            return None
        pe = self.rope_encoding
        return RopeSpec(rotary_dim=pe.rotary_dim, base=pe.base, train_length=int(self.cfg.train_tokens or 0),
                        fraction=pe.fraction)

    # -- forward --------------------------------------------------------------------------------
    def new_cache(self) -> DecoderCache:
        """A KV cache of un-rotated keys: decoding with it equals a full forward, every method."""
        return DecoderCache()

    def forward(self, ids: torch.Tensor, cache: DecoderCache | None = None, method: Any = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] -> logits [B, T, vocab]. With a cache, the tokens continue the cached ones
        (positions len(cache) ...) and the cache is extended. `method`: an extrapolation
        method (RoPE models only); None = the encoding's own hooks. `positions` [B|1, T]: a
        training sampler's positions (lengen.positions) instead of 0..T-1; training only, so
        neither a cache nor a method goes with them."""
        if method is not None and not self.is_rope:
            raise LengenError(f"extrapolation methods apply to RoPE models only; this model uses {pe_description(self.cfg)}")
        if positions is not None:
            if cache is not None or method is not None:
                raise LengenError("sampled positions are for training: a forward with a KV cache or an "
                                  "extrapolation method uses the positions 0..T-1")
            h = self.decoder(self.embed(ids) * self.embed_scale, positions.to(ids.device))
            return self.head(h).float()
        T = ids.shape[1]
        if cache is not None and cache.stale_for(method, len(cache) + T):
            # new frequencies (dynamic NTK): the deeper layers' cached keys are stale; re-run all
            full = ids if cache.ids is None else torch.cat([cache.ids.to(ids.device), ids], dim=1)
            cache.reset()
            cache.recomputes += 1
            return self(full, cache, method)[:, -T:]
        start = len(cache) if cache is not None else 0
        pos_q = torch.arange(start, start + T, device=ids.device)[None]
        pos_k = torch.arange(start + T, device=ids.device)[None] if cache is not None else None
        kv = cache.kv if cache is not None else None
        # positions 0..start+T-1: the method's sequence length (largest position + 1) is start + T
        h = self.decoder(self.embed(ids) * self.embed_scale, pos_q, pos_k, cache=kv, method=method,
                         seq_len=start + T if method is not None else None)
        if cache is not None:
            cache.append_ids(ids)
        return self.head(h).float()

    def logits_fn(self, method: Any = None) -> Callable[[torch.Tensor], torch.Tensor]:
        """A protocol-ready callable: LongTensor [B, T] -> logits [B, T, V], no grad, eval mode."""

        @torch.no_grad()
        def fn(ids: torch.Tensor) -> torch.Tensor:
            self.eval()
            return self(ids.to(self.embed.weight.device), method=method)

        return fn

    def nll_fn(self, method: Any = None):
        """The protocols' nll_fn (lengen.protocols.scoring) of this model with `method`."""
        return nll_from_logits(self.logits_fn(method))

    @torch.no_grad()
    def generate(self, ids: list[int], max_new_tokens: int, method: Any = None) -> list[int]:
        """Greedy decoding with the KV cache; returns the new token ids."""
        self.eval()
        cache = self.new_cache()
        x = torch.tensor([ids], dtype=torch.long, device=self.embed.weight.device)
        out: list[int] = []
        for _ in range(max_new_tokens):
            nxt = int(self(x, cache=cache, method=method)[0, -1].argmax())
            out.append(nxt)
            x = torch.tensor([[nxt]], dtype=torch.long, device=x.device)
        return out

    def generate_fn(self, method: Any = None) -> Callable[[list[int], int], list[int]]:
        return lambda ids, n: self.generate(ids, n, method)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
