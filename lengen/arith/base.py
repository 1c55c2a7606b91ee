"""The interface every arithmetic task implements. A task draws problems (numbers, lengen.arith.problem);
a format (lengen.arith.formats) turns them into tokens. Training draws each operand's digit count
uniformly and independently (the papers' sampling: uniform over digit counts, not over numbers);
evaluation draws a fixed number of problems in every cell of the heat map."""

from __future__ import annotations

import abc

import numpy as np

from lengen.arith.problem import Problem, random_number


class ArithTask(abc.ABC):
    name: str
    operator: str                      # "+" or "*"
    #: what the two coordinates of a cell count (the heat map's axes)
    cell_axes: tuple[str, str] = ("digits of a", "digits of b")

    @abc.abstractmethod
    def sample_digits(self, max_digits: int, rng: np.random.Generator) -> list[int]:
        """The digit count of each operand of one training problem (each 1..max_digits)."""

    @abc.abstractmethod
    def cell_of(self, digits: list[int]) -> tuple[int, int]:
        """The cell of a problem whose operands have these digit counts."""

    @abc.abstractmethod
    def cells(self, max_digits: int) -> list[tuple[int, int]]:
        """Every cell of the evaluation grid up to max_digits, row by row."""

    @abc.abstractmethod
    def operand_digits(self, cell: tuple[int, int], rng: np.random.Generator) -> list[int]:
        """The digit count of each operand of a problem in `cell`."""

    @abc.abstractmethod
    def answer_width(self, digits: list[int]) -> int:
        """The digits of the largest answer operands of these lengths can have (the padded width)."""

    @abc.abstractmethod
    def compute(self, operands: tuple[int, ...]) -> int:
        """The answer."""

    def in_training(self, cell: tuple[int, int], train_digits: int) -> bool:
        """Whether training draws problems of this cell (in distribution)."""
        return max(cell) <= train_digits

    def length_of(self, cell: tuple[int, int]) -> int | None:
        """The length a cell counts for in accuracy against length (None: none)."""
        return cell[0]

    def make(self, digits: list[int], rng: np.random.Generator) -> Problem:
        """A problem whose operands have these digit counts."""
        operands = tuple(random_number(d, rng) for d in digits)
        return Problem(operands, self.operator, self.compute(operands), self.cell_of(digits),
                       self.answer_width(digits))

    def problem(self, cell: tuple[int, int], rng: np.random.Generator) -> Problem:
        """An evaluation problem in `cell`."""
        return self.make(self.operand_digits(cell, rng), rng)

    def sample(self, batch_size: int, max_digits: int, rng: np.random.Generator) -> list[Problem]:
        """Training problems, each one's digit counts drawn on their own."""
        return [self.make(self.sample_digits(max_digits, rng), rng) for _ in range(batch_size)]

    def longest_answer(self, max_digits: int) -> int:
        """The most answer digits a problem up to max_digits can have (position-table checks)."""
        return max(self.answer_width(self.operand_digits_of_widest(c)) for c in self.cells(max_digits))

    def operand_digits_of_widest(self, cell: tuple[int, int]) -> list[int]:
        """The longest operands a cell allows (for size checks)."""
        return list(cell)

    def longest_prompt_digits(self, max_digits: int) -> int:
        """The most operand digits (all operands together) of a problem up to max_digits."""
        return max(sum(self.operand_digits_of_widest(c)) for c in self.cells(max_digits))


class TwoOperandTask(ArithTask):
    """a OP b, the cell is (digits of a, digits of b), each uniform on 1..N on its own."""

    def sample_digits(self, max_digits, rng):
        return [int(rng.integers(1, max_digits + 1)), int(rng.integers(1, max_digits + 1))]

    def cell_of(self, digits):
        return digits[0], digits[1]

    def cells(self, max_digits):
        return [(i, j) for i in range(1, max_digits + 1) for j in range(1, max_digits + 1)]

    def operand_digits(self, cell, rng):
        return list(cell)

    def length_of(self, cell):
        """Both operands n digits: the curves of Cho et al. (the diagonal of the heat map)."""
        return cell[0] if cell[0] == cell[1] else None
