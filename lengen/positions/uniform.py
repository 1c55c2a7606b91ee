"""T evenly spaced integer positions over [0, max_position): the deterministic test-time
alternative to sampling that the seed blog found better for randomized training."""

import torch

from lengen.positions.randomized import RandomizedPositions


class UniformPositions(RandomizedPositions):
    def sample(self, length, generator=None):
        self.check_length(length)
        # floor(k * max / T) is strictly increasing because max >= T, so positions stay distinct.
        pos = torch.arange(length, dtype=torch.int64) * self.max_position // length
        return pos.unsqueeze(0)
