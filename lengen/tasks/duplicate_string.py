"""Duplicate string (context-sensitive)."""

from __future__ import annotations

import numpy as np

from lengen.tasks.base import Task, full_mask


class DuplicateString(Task):
    """Bits; target = the input written twice (2L tokens). `101 -> 101101`."""

    name = "duplicate_string"
    level = "CS"
    input_vocab_size = 2
    output_vocab_size = 2
    input_symbols = output_symbols = ("0", "1")

    def output_length(self, length: int) -> int:
        return 2 * length

    def solve(self, inputs):
        inputs = np.asarray(inputs)
        targets = np.concatenate([inputs, inputs], axis=1)
        return targets, full_mask(targets)
