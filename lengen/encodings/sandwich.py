"""Sandwich (Chi et al. 2023, arXiv 2212.10356): a parameter-free bias from the inner product of
two sinusoid embeddings, as in NeMo's SandwichRelativePositionEmbedding:

    b_h(i, j) = [ sum_{k=1}^{d'/2} cos((j - i) * 10000^(-2k/d')) - d'/2 ] / (h * 8 / H),  h = 1..H

The sum is at most d'/2 (reached at distance 0), so the bias is 0 on the diagonal and <= 0
elsewhere; the per-head divisor spreads the heads like ALiBi's slopes. d' defaults to d_model
(option `dim`). The bias is even in i - j, so a bidirectional model gets no direction from it.
"""

from __future__ import annotations

import torch

from lengen.encodings.base import PositionalEncoding, relative_distance


class SandwichEncoding(PositionalEncoding):
    relative = True

    def __init__(self, cfg, dim: int | None = None, base: float = 10000.0):
        super().__init__(cfg)
        self.dim = int(dim or cfg.d_model)
        if self.dim < 2 or self.dim % 2:
            raise ValueError(f"sandwich: dim must be even and >= 2, got {self.dim}")
        # k = 1..d'/2 (NeMo's indexing, not 0..d'/2-1), so the slowest frequency is 1/base.
        k = torch.arange(1, self.dim // 2 + 1, dtype=torch.float32)
        self.register_buffer("inv_freq", base ** (-2.0 * k / self.dim), persistent=False)
        h = torch.arange(1, cfg.num_heads + 1, dtype=torch.float32)
        self.register_buffer("head_scale", h * 8.0 / cfg.num_heads, persistent=False)

    def prepare(self, pos_q, pos_k):
        dist = relative_distance(pos_q, pos_k)[:, 0]  # [B|1, Tq, Tk]; cos is even, so i-j = j-i
        # cos x - 1 = -2 sin^2(x/2): each term is <= 0 in floating point too, with no cancellation
        # against d'/2 at short distances. One frequency at a time: a [Tq, Tk, d'/2] tensor
        # would take 128 MB at 1000 tokens.
        total = torch.zeros_like(dist)
        for w in self.inv_freq:
            total -= 2.0 * torch.sin(dist * (w / 2)).square()
        return total[:, None] / self.head_scale[None, :, None, None]

    def bias(self, layer, state):
        return state
