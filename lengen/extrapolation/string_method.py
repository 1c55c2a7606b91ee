"""STRING (An et al. 2024, "Why Does the Effective Context Length of LLMs Fall Short?",
HKUNLP/STRING): shift the well-trained small distances over the rarely trained large ones.

With shift S (`shifted_offset`) and local window W (`small_local_value`), delta = p_i - p_j:

    r(i, j) = delta            if delta < S     (near: ordinary RoPE)
            = delta - S + W    if delta >= S    (far: q at p_i - S + W, k at p_j)

Largest r = max(S - 1, T - 1 - S + W). Requires 0 <= W < S; S = 0 turns STRING off entirely
(plain RoPE, no attention factor).

Attention factor: the reference multiplies q and k by 1 + 0.1 ln 2 (logits x 1.1434), for every
length including T <= S; `attention_factor` (default that value) multiplies cos and sin here the
same way (on top of a composed frequency method's own factor); attention_factor=1 turns it off.

The diagonal delta = S: the reference prefill (flash-attn's inclusive `window_size=[S, 0]`) counts
the key at delta = S twice, at r = S and at r = W; its decode puts it on the far side only. We use
one r per pair, delta = S far (the paper's Eq. 4 and the decode path), so prefill equals decoding.

Defaults: S = int(0.33 L0), W = min(128, S // 4) (the README's `shifted_offset=int(0.33 L)`,
`small_local_value=128`, with L the training length: Llama-3.1, L0 = 131072, gives S = 43253,
W = 128; W is capped for small L0 so that W << S). The reference eval scripts instead take L = the
test length (RULER: S = 0.33 T): pass `shift` for that.

(This module is not named string.py so that it can never shadow the standard library's `string`.)
"""

from __future__ import annotations

import math

import torch

from lengen.extrapolation.base import causal_attention
from lengen.extrapolation.remap import RemapMethod
from lengen.kernels.remap_tiles import RemapRule
from lengen.encodings.rope import apply_rotary, rope_cos_sin

STRING_FACTOR = 1.0 + 0.1 * math.log(2.0)


class String(RemapMethod):
    name = "string"

    def __init__(self, rope, shift: int | None = None, window: int | None = None,
                 attention_factor: float = STRING_FACTOR, **blocking):
        super().__init__(rope, **blocking)
        self.shift = int(shift) if shift is not None else int(0.33 * rope.train_length)
        self.local = int(window) if window is not None else min(128, self.shift // 4)
        self.factor = float(attention_factor)
        if self.shift < 0 or self.local < 0 or self.factor <= 0:
            raise ValueError("shift and window must be >= 0 and attention_factor > 0")
        if self.shift > 0 and self.local >= self.shift:
            raise ValueError(f"window ({self.local}) must be smaller than shift ({self.shift})")
        self.window = self.shift  # the RemapMethod near window: delta < S keeps its distance

    window_option = "shift"   # the near window is the shift S

    def largest_window(self) -> int:
        return self.rope.train_length   # near distances up to S - 1 <= L0 - 1

    def far_query_positions(self, pos_q: torch.Tensor) -> torch.Tensor:
        return pos_q.double() - (self.shift - self.local)

    def far_key_positions(self, pos_k: torch.Tensor) -> torch.Tensor:
        return pos_k.double()

    def remap_rule(self) -> RemapRule | None:
        return None if self.shift == 0 else RemapRule(self.shift, q_add=self.local - self.shift)

    def relative_positions(self, pos_q, pos_k):
        if self.shift == 0:
            return super(RemapMethod, self).relative_positions(pos_q, pos_k)
        return super().relative_positions(pos_q, pos_k)

    def attention(self, q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale):
        if self.shift == 0:  # off: plain rotated attention
            q = apply_rotary(q, *rope_cos_sin(pos_q.to(q.device), inv_freq, attention_factor))
            k = apply_rotary(k, *rope_cos_sin(pos_k.to(k.device), inv_freq, attention_factor))
            return causal_attention(q, k, v, pos_q, pos_k, scale)
        return super().attention(q, k, v, pos_q, pos_k, inv_freq, attention_factor * self.factor, scale)
