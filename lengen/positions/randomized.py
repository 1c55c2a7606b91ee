"""Randomized positions (Ruoss et al. 2023): a sorted sample of T distinct integers from
[0, max_position), drawn afresh for each batch and shared by its rows."""

import torch

from lengen.errors import LengenError
from lengen.positions.base import PositionSampler


class RandomizedPositions(PositionSampler):
    def check_length(self, length):
        if length > self.max_position:
            raise LengenError(
                f"randomized positions: sequence length {length} exceeds max_position "
                f"{self.max_position}; raise --max-position"
            )

    def sample(self, length, generator=None):
        self.check_length(length)
        # A prefix of a random permutation is a uniform sample without replacement.
        picks = torch.randperm(self.max_position, generator=generator)[:length]
        return picks.sort().values.unsqueeze(0)
