"""Solve equation (deterministic context-free)."""

from __future__ import annotations

import numpy as np

from lengen.tasks.base import Task, full_mask
from lengen.tasks.expressions import MODULUS, Draws, ExprIds, draws_needed, evaluate, generate

# Its own id map, as in the original benchmark.
IDS = ExprIds(plus=5, minus=6, lparen=7, rparen=8, unknown=9)
EQUALS = 10


class SolveEquation(Task):
    """`E = v` with one digit of a +/- expression E replaced by x; y = the x that makes it hold mod 5.

    Ids: 0-4 digits, 5 `+`, 6 `-`, 7 `(`, 8 `)`, 9 `x`, 10 `=`. E = G(L-2) and `=` sits at L-2.
    L < 3: all-zero input, y = 0. `(-x+2)=4` -> 3.
    """

    name = "solve_equation"
    level = "DCF"
    input_vocab_size = 11
    output_vocab_size = 5
    input_symbols = ("0", "1", "2", "3", "4", "+", "-", "(", ")", "x", "=")
    output_symbols = ("0", "1", "2", "3", "4")

    def output_length(self, length: int) -> int:
        return 1

    def _sample(self, batch_size, length, rng):
        if length < 3:
            inputs = np.zeros((batch_size, length), dtype=np.int64)
            return (inputs, *self.solve(inputs))
        n = length - 2
        draw = Draws(rng, batch_size * (draws_needed(n) + 1))
        inputs = np.empty((batch_size, length), dtype=np.int64)
        for row in inputs:
            expr = generate(n, IDS, draw)
            j = draw(n)
            while expr[j] >= MODULUS:  # step forward cyclically to a digit (G always has one)
                j = (j + 1) % n
            row[n + 1] = evaluate(expr, IDS)  # v, with the digit still in place
            expr[j] = IDS.unknown
            row[:n] = expr
            row[n] = EQUALS
        return (inputs, *self.solve(inputs))

    def solve(self, inputs):
        inputs = np.asarray(inputs)
        batch, length = inputs.shape
        targets = np.zeros((batch, 1), dtype=np.int64)
        if length >= 3:
            for i, row in enumerate(inputs.tolist()):
                expr, v = row[:-2], row[-1]
                # E is affine in x mod 5: E(x) = c + s*x; with x once under +/- only, s = +-1.
                c = evaluate(expr, IDS, unknown_value=0)
                s = (evaluate(expr, IDS, unknown_value=1) - c) % MODULUS
                if s == 0:
                    raise ValueError(f"equation without a unique solution: {row}")
                targets[i, 0] = (v - c) * pow(s, -1, MODULUS) % MODULUS
        return targets, full_mask(targets)
