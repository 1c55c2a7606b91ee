"""Modular arithmetic with brackets (deterministic context-free)."""

from __future__ import annotations

import numpy as np

from lengen.tasks.base import Task, full_mask
from lengen.tasks.expressions import Draws, ExprIds, draws_needed, evaluate, generate

IDS = ExprIds(plus=5, minus=6, times=7, lparen=8, rparen=9)


class ModularArithmeticBrackets(Task):
    """A random bracketed expression G(L) over digits 0-4 and + - *; y = its value mod 5.

    Ids: 0-4 digits, 5 `+`, 6 `-`, 7 `*`, 8 `(`, 9 `)`, 10 unused. `(4*(-0))` -> 0, `-3` -> 2.
    """

    name = "modular_arithmetic_brackets"
    level = "DCF"
    input_vocab_size = 11
    output_vocab_size = 5
    input_symbols = ("0", "1", "2", "3", "4", "+", "-", "*", "(", ")", " ")
    output_symbols = ("0", "1", "2", "3", "4")

    def output_length(self, length: int) -> int:
        return 1

    def _sample(self, batch_size, length, rng):
        draw = Draws(rng, batch_size * draws_needed(length))
        inputs = np.array([generate(length, IDS, draw) for _ in range(batch_size)], dtype=np.int64)
        return (inputs, *self.solve(inputs))

    def solve(self, inputs):
        values = [evaluate(row, IDS) for row in np.asarray(inputs).tolist()]
        targets = np.array(values, dtype=np.int64).reshape(-1, 1)
        return targets, full_mask(targets)
