"""a * b: n x m, or n x 1 (and n x k) when `b_digits` caps the second operand's digits."""

from lengen.arith.base import TwoOperandTask


class Multiplication(TwoOperandTask):
    name = "multiplication"
    operator = "*"

    def __init__(self, b_digits: int | None = None):
        self.b_digits = b_digits

    def _b_max(self, max_digits: int) -> int:
        return max_digits if self.b_digits is None else min(self.b_digits, max_digits)

    def sample_digits(self, max_digits, rng):
        return [int(rng.integers(1, max_digits + 1)), int(rng.integers(1, self._b_max(max_digits) + 1))]

    def cells(self, max_digits):
        return [(i, j) for i in range(1, max_digits + 1) for j in range(1, self._b_max(max_digits) + 1)]

    def compute(self, operands):
        return operands[0] * operands[1]

    def answer_width(self, digits):
        return digits[0] + digits[1]

    def length_of(self, cell):
        """n x m: the diagonal; n x k (b capped): the digits of a, over every b."""
        return cell[0] if self.b_digits is not None or cell[0] == cell[1] else None
