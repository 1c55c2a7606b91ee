"""Equal-mean random positions (Su, kexue.fm/archives/9444, "equal-mean random position training").

Per batch, draw a span n with mean T (T = the length of the sequence being trained) and use T
evenly spaced float positions over [0, n], both ends included, i.e. the seed's

    np.linspace(0, 1, T) * n

so positions are sorted, start at 0 and end at n. On average they are the standard positions
0..T-1 stretched by T/(T-1); at test time a model trained this way uses standard positions.

Distributions of n (option `distribution`):
  exponential  n ~ Exp(mean T): mean and standard deviation T, so spans of 4T are still seen
               now and then (the seed's choice for its best MLM result).
  beta         n = M * X, X ~ Beta(alpha, beta) with mean T/M: the test length M (option
               `test_length`, in tokens the encoder sees) maps to 1. The free shape is
               beta = `beta_shape` (default 1.0), and alpha = beta * mu / (1 - mu), mu = T/M.
               beta < 1 puts more mass near the full test span M, beta > 1 less.

Positions are float32 (so only encodings that accept floats combine with this sampler).
"""

from __future__ import annotations

import numpy as np
import torch

from lengen.errors import LengenError
from lengen.positions.base import PositionSampler

DISTRIBUTIONS = ("exponential", "beta")


class EqualMeanPositions(PositionSampler):
    integer = False

    def __init__(self, max_position: int = 2048, distribution: str = "exponential",
                 test_length: int | None = None, beta_shape: float = 1.0):
        super().__init__(max_position=max_position)
        if distribution not in DISTRIBUTIONS:
            raise LengenError(f"equal_mean: distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
        if distribution == "beta":
            if test_length is None or test_length < 2:
                raise LengenError("equal_mean with distribution=beta needs test_length=M (the test "
                                  "sequence length in tokens, M > the training length)")
            if beta_shape <= 0:
                raise LengenError(f"equal_mean: beta_shape must be > 0, got {beta_shape}")
        self.distribution = distribution
        self.test_length = None if test_length is None else int(test_length)
        self.beta_shape = float(beta_shape)

    def position_bound(self, length: int) -> float:
        # Exponential spans are unbounded; this bound only matters to integer-only encodings,
        # which refuse this sampler anyway.
        return float(self.test_length) if self.distribution == "beta" else float("inf")

    def check_length(self, length: int) -> None:
        if self.distribution == "beta" and length >= self.test_length:
            raise LengenError(f"equal_mean (beta): sequence length {length} must be below "
                              f"test_length {self.test_length} (the mean span T/M must be < 1)")

    def beta_params(self, length: int) -> tuple[float, float]:
        """(alpha, beta) with mean alpha / (alpha + beta) = length / test_length."""
        mu = length / self.test_length
        return self.beta_shape * mu / (1.0 - mu), self.beta_shape

    def span(self, length: int, rng: np.random.Generator) -> float:
        if self.distribution == "exponential":
            return float(rng.exponential(length))
        return float(self.test_length * rng.beta(*self.beta_params(length)))

    def sample(self, length, generator=None):
        self.check_length(length)
        # torch has no beta sampler taking a Generator: seed a numpy one from the torch stream,
        # so the positions stay a function of the run's position generator (and resume exactly).
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        n = self.span(length, np.random.default_rng(seed))
        return (torch.linspace(0.0, 1.0, length, dtype=torch.float64) * n).float().unsqueeze(0)
