"""Decoder attention: SelfAttention's weights and encoding hooks, plus what incremental decoding
and training-free RoPE methods need.

Two paths, chosen per forward pass:
  * encoding hooks (training, and every non-RoPE encoding): SelfAttention.attend with
    pos_q = the new tokens' positions and pos_k = all cached positions;
  * RoPE with an extrapolation method: its entry point `method.attend` gets UN-rotated q/k (the
    cache stores keys un-rotated), picks its frequencies for the current sequence length and may
    replace the attention altogether (ReRoPE, Self-Extend, Lambda masks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lengen.encodings.rope import RopeEncoding
from lengen.extrapolation.cache import RawKVCache
from lengen.models.attention import AttentionContext, SelfAttention


class RopeRuntime:
    """The extrapolation method of one forward pass and its sequence length, shared by all layers."""

    def __init__(self, method: Any, pos_k: torch.Tensor):
        self.method = method
        # HF convention: the sequence length is the largest position + 1 (matters for dynamic NTK);
        # the keys include every query, so this is the length of the whole sequence so far.
        self.seq_len = int(pos_k.max()) + 1


@dataclass
class DecoderContext(AttentionContext):
    cache: RawKVCache | None = None   # un-rotated keys (lengen.extrapolation.cache)
    rope: RopeRuntime | None = None


class DecoderAttention(SelfAttention):
    def forward(self, x: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.project(x)
        cache = getattr(ctx, "cache", None)
        if cache is not None:
            k, v, _ = cache.update(self.layer, k, v, ctx.pos_q)
        rope = getattr(ctx, "rope", None)
        if rope is not None and not isinstance(self.pe[0].for_layer(self.layer), RopeEncoding):
            rope = None  # a NoPE layer of a per-layer pattern: the method acts on RoPE layers only
        out = self.attend(q, k, v, ctx) if rope is None else self.attend_rope(q, k, v, ctx, rope)
        return self.out(out.transpose(1, 2).reshape(B, T, D))

    def attend_rope(self, q, k, v, ctx: AttentionContext, rope: RopeRuntime) -> torch.Tensor:
        q, k, scale = self.scaled_qk(q, k, ctx.pos_q)  # the model's trained key norm and logit scaling
        # The method rotates (or remaps) q and k itself, applies its log-n query scale and is causal
        # by position: the cached keys are un-rotated, so every step sees exactly the same logits
        # as a full forward pass over the same tokens.
        return rope.method.attend(q, k, v, ctx.pos_q, ctx.pos_k, scale, seq_len=rope.seq_len)
