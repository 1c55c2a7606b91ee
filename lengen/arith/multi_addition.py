"""a + b + c + ...: 2..max_operands operands, each of 1..N digits drawn on its own. Its cell is
(digits of the longest operand, number of operands), the axes of Cho et al.'s multi-operand
heat maps."""

from lengen.arith.base import ArithTask
from lengen.arith.problem import num_digits


class MultiAddition(ArithTask):
    name = "multi_addition"
    operator = "+"
    cell_axes = ("digits of the longest operand", "operands")

    def __init__(self, max_operands: int = 3):
        self.max_operands = max_operands

    def sample_digits(self, max_digits, rng):
        count = int(rng.integers(2, self.max_operands + 1))
        return [int(d) for d in rng.integers(1, max_digits + 1, size=count)]

    def cell_of(self, digits):
        return max(digits), len(digits)

    def cells(self, max_digits):
        return [(d, k) for d in range(1, max_digits + 1) for k in range(2, self.max_operands + 1)]

    def operand_digits(self, cell, rng):
        longest, count = cell
        digits = [int(d) for d in rng.integers(1, longest + 1, size=count)]
        digits[int(rng.integers(0, count))] = longest  # so the longest has exactly the cell's length
        return digits

    def in_training(self, cell, train_digits):
        return cell[0] <= train_digits

    def operand_digits_of_widest(self, cell):
        return [cell[0]] * cell[1]

    def compute(self, operands):
        return sum(operands)

    def answer_width(self, digits):
        return num_digits(sum(10 ** d - 1 for d in digits))
