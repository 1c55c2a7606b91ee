"""ALiBi (Press et al. 2022): a per-head linear distance penalty.

Causal: b = -m_h (p_i - p_j). Bidirectional, as in Ruoss et al.: b = -m_h (|p_i - p_j| - 0.5 [p_j < p_i]);
the half step on past keys lets the encoder tell left from right."""

from __future__ import annotations

import math

import torch

from lengen.encodings.base import PositionalEncoding, relative_distance


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """Geometric slopes 2^(-8h/n) for a power-of-two n; otherwise those of the next lower power
    of two, then every other slope of twice that many (Press et al.'s reference code)."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    p = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(p)
    if p < num_heads:
        slopes += power_of_two(2 * p)[0::2][: num_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


class AlibiEncoding(PositionalEncoding):
    relative = True
    causal_past_only = True  # causal penalty m (p_q - p_k): a later key's id becomes a bonus

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("slopes", alibi_slopes(cfg.num_heads), persistent=False)

    def prepare(self, pos_q, pos_k):
        dist = relative_distance(pos_q, pos_k)  # i - j
        if self.cfg.causal:
            penalty = dist
        else:
            penalty = dist.abs() - 0.5 * (dist > 0).float()
        return -self.slopes[None, :, None, None] * penalty

    def bias(self, layer, state):
        return state
