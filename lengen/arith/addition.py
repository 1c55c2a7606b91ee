"""a + b (both papers' main task)."""

from lengen.arith.base import TwoOperandTask


class Addition(TwoOperandTask):
    name = "addition"
    operator = "+"

    def compute(self, operands):
        return operands[0] + operands[1]

    def answer_width(self, digits):
        return max(digits) + 1
