"""Cycle navigation (regular), with the seed's move alphabet."""

from __future__ import annotations

import numpy as np

from lengen.tasks.base import Task, full_mask

# Token -> move. The seed's rule (0, 1, 2 = +0, +1, -1), not the original benchmark's.
MOVES = np.array([0, 1, -1])


class CycleNavigation(Task):
    """Moves x_i in {0: +0, 1: +1, 2: -1} on a 5-cycle from 0; y = final position.

    `010211 -> 2` (0+1+0-1+1+1).
    """

    name = "cycle_navigation"
    level = "R"
    permutation_invariant = True
    input_vocab_size = 3
    output_vocab_size = 5
    input_symbols = ("+0", "+1", "-1")
    output_symbols = ("0", "1", "2", "3", "4")
    symbol_sep = " "

    def output_length(self, length: int) -> int:
        return 1

    def solve(self, inputs):
        targets = (MOVES[np.asarray(inputs)].sum(axis=1) % 5)[:, None].astype(np.int64)
        return targets, full_mask(targets)
