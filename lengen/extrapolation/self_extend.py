"""Self-Extend (Jin et al. 2024, datamllab/LongLM): neighbor attention inside a window W, grouped
(floor-divided) positions beyond it.

    r(i, j) = i - j                                   if i - j < W
            = floor(i / G) - floor(j / G) + W - W / G  otherwise

Far pairs: q at floor(p_i / G) + W - W / G, keys at floor(p_j / G). At i - j = W the grouped
distance is about W, so the two pieces meet. Capacity (L0 - W) G + W.

Pitfall: the reference prefill uses the float shift W - W/G while its flash decode path uses the
integer W - W//G; they differ when G does not divide W. We use the float shift everywhere, so
decoding matches the prefill. Defaults G = 8, W = L0 / 4 (the reference: G = 8, W = 1024 at L0 = 4096).
"""

from __future__ import annotations

import torch

from lengen.extrapolation.remap import RemapMethod
from lengen.kernels.remap_tiles import RemapRule


class SelfExtend(RemapMethod):
    name = "self_extend"

    def __init__(self, rope, group: int = 8, window: int | None = None, **blocking):
        super().__init__(rope, **blocking)
        self.group = int(group)
        self.window = int(window) if window is not None else max(1, rope.train_length // 4)
        if self.group < 1 or self.window < 1:
            raise ValueError("group and window must be >= 1")

    def far_query_positions(self, pos_q: torch.Tensor) -> torch.Tensor:
        return torch.floor(pos_q.double() / self.group) + (self.window - self.window / self.group)

    def far_key_positions(self, pos_k: torch.Tensor) -> torch.Tensor:
        return torch.floor(pos_k.double() / self.group)

    def remap_rule(self) -> RemapRule:
        return RemapRule(self.window, group=self.group, floor=True,
                         q_add=self.window - self.window / self.group)
