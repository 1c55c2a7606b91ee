"""Transformer-XL relative encoding (Dai et al. 2019), as used by Ruoss et al.:

    logit(i, j) = (q_i + u) . k_j + (q_i + v) . W_r R(p_j - p_i)

with R a two-sided sinusoid of the position difference and u, v, W_r learned per layer.

Instead of building R for every pair (or the rel-shift trick, which needs a regular grid of
positions), we use sin/cos addition formulas: a . R(p_j - p_i) splits into a product of a
function of p_i and a function of p_j. So the positional term is one more dot product between an
augmented query and an augmented key, computed exactly for any positions (randomized, float)
inside the same fused attention call.
"""

from __future__ import annotations

import torch
from torch import nn

from lengen.encodings.base import PositionalEncoding, sinusoid_angles


class RelativeEncoding(PositionalEncoding):
    relative = True

    def __init__(self, cfg, rel_dim: int | None = None, base: float = 10000.0):
        super().__init__(cfg)
        self.rel_dim = int(rel_dim or cfg.d_model)
        if self.rel_dim % 2:
            raise ValueError("relative encoding: rel_dim must be even")
        self.base = float(base)
        H, hd = cfg.num_heads, cfg.head_dim
        # W_r maps R (rel_dim) to every head's key space; stored [layers, H, hd, rel_dim].
        self.w_r = nn.Parameter(torch.randn(cfg.num_layers, H, hd, self.rel_dim) / self.rel_dim**0.5)
        self.u = nn.Parameter(torch.randn(cfg.num_layers, H, hd) * 0.02)
        self.v = nn.Parameter(torch.randn(cfg.num_layers, H, hd) * 0.02)

    def prepare(self, pos_q, pos_k):
        aq = sinusoid_angles(pos_q, self.rel_dim, self.base)[:, None]  # [B|1, 1, Tq, r/2]
        ak = aq if pos_k is pos_q else sinusoid_angles(pos_k, self.rel_dim, self.base)[:, None]
        return aq.cos(), aq.sin(), torch.cat([ak.sin(), ak.cos()], dim=-1)

    def transform_qk(self, layer, state, q, k):
        cos_q, sin_q, k_pos = state
        # a_i = W_r^T (q_i + v): the query's coefficients on [sin | cos] of the difference.
        a = torch.einsum("bhtd,hdr->bhtr", q + self.v[layer][:, None].to(q.dtype), self.w_r[layer].to(q.dtype))
        A, B = a.chunk(2, dim=-1)
        # a . R(x_j - x_i) = sin x_j (A cos x_i + B sin x_i) + cos x_j (B cos x_i - A sin x_i)
        q_pos = torch.cat([A * cos_q + B * sin_q, B * cos_q - A * sin_q], dim=-1).to(q.dtype)
        q_aug = torch.cat([q + self.u[layer][:, None], q_pos], dim=-1)
        k_aug = torch.cat([k, k_pos.to(k.dtype).expand(k.shape[0], k.shape[1], -1, -1)], dim=-1)
        return q_aug, k_aug
