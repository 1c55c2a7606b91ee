"""Odds first (context-sensitive), with the seed's order."""

from __future__ import annotations

import numpy as np

from lengen.tasks.base import Task, full_mask


class OddsFirst(Task):
    """Bits; target = the tokens at 1-indexed odd positions, then those at even positions.

    (0-indexed: x[0], x[2], ..., then x[1], x[3], ...; the seed's rule.) `000100 -> 000010`.
    """

    name = "odds_first"
    level = "CS"
    input_vocab_size = 2
    output_vocab_size = 2
    input_symbols = output_symbols = ("0", "1")

    def output_length(self, length: int) -> int:
        return length

    def solve(self, inputs):
        inputs = np.asarray(inputs)
        targets = np.concatenate([inputs[:, 0::2], inputs[:, 1::2]], axis=1)
        return targets, full_mask(targets)
