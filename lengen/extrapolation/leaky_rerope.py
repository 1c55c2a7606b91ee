"""Leaky ReRoPE (Su 2023): beyond the window w, relative positions grow k times slower.

    r(i, j) = i - j                 if i - j < w
            = w + (i - j - w) / k   otherwise

Far pairs: q at p_i / k + w - w / k, keys at p_j / k (the reference patch: a second rotary at
frequency 1/k with q offset by w (k - 1) in scaled units). Defaults w = L0 / 4, k = 16.
k = 1 is plain RoPE; k -> infinity is ReRoPE.
"""

from __future__ import annotations

import torch

from lengen.extrapolation.remap import RemapMethod
from lengen.kernels.remap_tiles import RemapRule


class LeakyReRope(RemapMethod):
    name = "leaky_rerope"

    def __init__(self, rope, window: int | None = None, factor: float = 16.0, **blocking):
        super().__init__(rope, **blocking)
        self.window = int(window) if window is not None else max(1, rope.train_length // 4)
        self.factor = float(factor)
        if self.window < 1 or self.factor <= 0:
            raise ValueError("window must be >= 1 and factor > 0")

    def far_query_positions(self, pos_q: torch.Tensor) -> torch.Tensor:
        return pos_q.double() / self.factor + (self.window - self.window / self.factor)

    def far_key_positions(self, pos_k: torch.Tensor) -> torch.Tensor:
        return pos_k.double() / self.factor

    def remap_rule(self) -> RemapRule:
        return RemapRule(self.window, group=self.factor, q_add=self.window - self.window / self.factor)
