"""0, 1, ..., T-1: the ordinary positions."""

import torch

from lengen.positions.base import PositionSampler


class StandardPositions(PositionSampler):
    def position_bound(self, length: int) -> float:
        return length

    def sample(self, length, generator=None):
        return torch.arange(length).unsqueeze(0)
