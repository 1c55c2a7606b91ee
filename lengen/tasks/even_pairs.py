"""Even pairs (regular)."""

from __future__ import annotations

import numpy as np

from lengen.tasks.base import Task, full_mask


class EvenPairs(Task):
    """Bits; y = number of adjacent unequal pairs mod 2 (= [first bit != last bit]).

    `01001 -> 1` (pairs 01, 10, 00, 01: three changes).
    """

    name = "even_pairs"
    level = "R"
    input_vocab_size = 2
    output_vocab_size = 2
    input_symbols = output_symbols = ("0", "1")

    def output_length(self, length: int) -> int:
        return 1

    def solve(self, inputs):
        inputs = np.asarray(inputs)
        changes = (inputs[:, 1:] != inputs[:, :-1]).sum(axis=1)
        targets = (changes % 2)[:, None].astype(np.int64)
        return targets, full_mask(targets)
