"""One arithmetic problem, as its numbers (not yet tokens): the operands, their digit counts, the
answer and the (digits of a, digits of b) cell it is scored in."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Problem:
    operands: tuple[int, ...]
    operator: str           # "+" or "*"
    answer: int
    cell: tuple[int, int]   # the heat map's cell (task-defined: digits of a and b, or digits and operands)
    answer_width: int       # digits of the zero-padded answer in the padded format


def num_digits(n: int) -> int:
    return len(str(n))


def random_number(digits: int, rng: np.random.Generator) -> int:
    """A uniform number with exactly `digits` digits (leading digit != 0; one digit: 0..9)."""
    if digits == 1:
        return int(rng.integers(0, 10))
    lead = int(rng.integers(1, 10))
    rest = rng.integers(0, 10, size=digits - 1)
    return int(str(lead) + "".join(map(str, rest)))
