"""Position samplers: the one place positions come from. Every encoding reads the tensor a
sampler returns, so any encoding combines with any sampler."""

from __future__ import annotations

import torch


class PositionSampler:
    """Produces the positions of a length-`length` sequence, shape [1, length] (shared by the
    batch) or [batch, length]. Integer samplers return int64, the others float32.

    `integer` tells encodings that need integer positions (a learned table, T5 buckets)
    whether they can be combined with this sampler; it is checked at config time.
    """

    integer: bool = True

    def __init__(self, max_position: int = 2048, **options):
        if options:
            raise TypeError(f"unexpected options {sorted(options)}")
        self.max_position = int(max_position)

    def position_bound(self, length: int) -> float:
        """Upper bound (exclusive) of the positions for this length; used for config checks."""
        return self.max_position

    def check_length(self, length: int) -> None:
        """Raise LengenError if this sampler cannot serve sequences of `length` tokens."""

    def sample(self, length: int, generator: torch.Generator | None = None) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, length: int, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.sample(length, generator)
