"""Modular arithmetic without brackets (regular)."""

from __future__ import annotations

import numpy as np

from lengen.tasks.base import Task, full_mask

PLUS, MINUS, TIMES = 5, 6, 7


class ModularArithmetic(Task):
    """Digits 0-4 at even positions, operators + - * at odd ones; y = value mod 5, `*` first.

    Ids: 0-4 digits, 5 `+`, 6 `-`, 7 `*`, 8 unused blank. The length is forced odd (an even request
    gives length - 1 tokens). `4+0*0` = [4,5,0,7,0] -> 4.
    """

    name = "modular_arithmetic"
    level = "R"
    input_vocab_size = 9
    output_vocab_size = 5
    input_symbols = ("0", "1", "2", "3", "4", "+", "-", "*", " ")
    output_symbols = ("0", "1", "2", "3", "4")

    def output_length(self, length: int) -> int:
        return 1

    def input_length(self, length: int) -> int:
        # An expression alternates digit/operator and ends on a digit.
        return length if length % 2 else length - 1

    def _sample(self, batch_size, length, rng):
        n = self.input_length(length)
        inputs = np.empty((batch_size, n), dtype=np.int64)
        inputs[:, 0::2] = rng.integers(0, 5, size=(batch_size, (n + 1) // 2))
        inputs[:, 1::2] = rng.integers(PLUS, TIMES + 1, size=(batch_size, n // 2))
        return (inputs, *self.solve(inputs))

    def solve(self, inputs):
        inputs = np.asarray(inputs, dtype=np.int64)
        # One left-to-right pass for the whole batch: `total` holds finished +/- terms, `term` the
        # running product that a `*` extends.
        total = np.zeros(len(inputs), dtype=np.int64)
        term = inputs[:, 0] % 5
        for i in range(1, inputs.shape[1] - 1, 2):
            op, digit = inputs[:, i], inputs[:, i + 1]
            times = op == TIMES
            total = np.where(times, total, total + term)
            term = np.where(times, term * digit, np.where(op == MINUS, -digit, digit)) % 5
        targets = ((total + term) % 5)[:, None]
        return targets, full_mask(targets)
