"""ReRoPE (Su 2023, bojone/rerope): relative positions beyond a window are all set to the window.

    r(i, j) = i - j   if i - j < w
            = w       otherwise

Far pairs: q rotated by the constant w, keys unrotated (position 0). Default w = L0 / 4 (the
reference used w = 512..1024 at L0 = 4096). Pairs with the window >= the sequence are plain RoPE.
"""

from __future__ import annotations

import torch

from lengen.extrapolation.remap import RemapMethod, constant_positions
from lengen.kernels.remap_tiles import RemapRule


class ReRope(RemapMethod):
    name = "rerope"

    def __init__(self, rope, window: int | None = None, **blocking):
        super().__init__(rope, **blocking)
        self.window = int(window) if window is not None else max(1, rope.train_length // 4)
        if self.window < 1:
            raise ValueError("window must be >= 1")

    def largest_window(self) -> int:
        return self.rope.train_length   # far pairs at r = window: L0, as lambda's and DCA's references allow

    def far_query_positions(self, pos_q: torch.Tensor) -> torch.Tensor:
        return constant_positions(pos_q, self.window)

    def remap_rule(self) -> RemapRule:
        return RemapRule(self.window, q_mul=0.0, q_add=self.window, k_mode="zero")
