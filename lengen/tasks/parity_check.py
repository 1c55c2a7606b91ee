"""Parity check (regular)."""

from __future__ import annotations

import numpy as np

from lengen.tasks.base import Task, full_mask


class ParityCheck(Task):
    """Bits; y = number of ones mod 2. `10011 -> 1`."""

    name = "parity_check"
    level = "R"
    permutation_invariant = True
    input_vocab_size = 2
    output_vocab_size = 2
    input_symbols = output_symbols = ("0", "1")

    def output_length(self, length: int) -> int:
        return 1

    def solve(self, inputs):
        targets = (np.asarray(inputs).sum(axis=1) % 2)[:, None].astype(np.int64)
        return targets, full_mask(targets)
