"""Compute square root (context-sensitive)."""

from __future__ import annotations

import math

import numpy as np

from lengen.tasks import binary
from lengen.tasks.base import Task, full_mask


class ComputeSqrt(Task):
    """n ~ U{1..2^L-1} as L big-endian bits; target = floor(sqrt(n)) as ceil(L/2) big-endian bits,
    zero-padded on the left. `11001001` (201) -> `1110` (14).
    """

    name = "compute_sqrt"
    level = "CS"
    input_vocab_size = 2
    output_vocab_size = 2
    input_symbols = output_symbols = ("0", "1")

    def output_length(self, length: int) -> int:
        return (length + 1) // 2

    def sample_inputs(self, batch_size, length, rng):
        return binary.uniform_nonzero_bits(batch_size, length, rng)

    def solve(self, inputs):
        inputs = np.asarray(inputs)
        width = self.output_length(inputs.shape[1])
        roots = [math.isqrt(n) for n in binary.bits_to_ints(inputs[:, ::-1])]
        targets = binary.ints_to_bits(roots, width)[:, ::-1].copy()
        return targets, full_mask(targets)
