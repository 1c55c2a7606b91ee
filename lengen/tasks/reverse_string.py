"""Reverse string (deterministic context-free)."""

from __future__ import annotations

import numpy as np

from lengen.tasks.base import Task, full_mask


class ReverseString(Task):
    """Bits; target = the input reversed. `00011 -> 11000`."""

    name = "reverse_string"
    level = "DCF"
    input_vocab_size = 2
    output_vocab_size = 2
    input_symbols = output_symbols = ("0", "1")

    def output_length(self, length: int) -> int:
        return length

    def solve(self, inputs):
        targets = np.asarray(inputs)[:, ::-1].copy()
        return targets, full_mask(targets)
