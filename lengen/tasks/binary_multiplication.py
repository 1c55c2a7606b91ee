"""Binary multiplication (context-sensitive)."""

from __future__ import annotations

import numpy as np

from lengen.tasks import binary
from lengen.tasks.base import Task, decode_terminated


class BinaryMultiplication(Task):
    """n, separator, m as little-endian bits; target = n * m in minimal little-endian bits, the
    terminator 2, then 0s to L tokens (mask: answer and terminator). Without a separator (L <= 2)
    the answer body is L - 1 zeros. `111*011` (7 * 6) -> `010101|.` = [0,1,0,1,0,1,2,0].
    """

    name = "binary_multiplication"
    level = "CS"
    input_vocab_size = 3
    output_vocab_size = 3
    output_symbols = ("0", "1", "|")

    def output_length(self, length: int) -> int:
        return length

    def sample_inputs(self, batch_size, length, rng):
        return binary.sample_operands(batch_size, length, rng)

    def solve(self, inputs):
        n_bits, m_bits, has_sep = binary.split_operands(inputs)
        length = n_bits.shape[1]
        # Python ints: 512 products of 250-bit numbers cost far less than a bit-level loop.
        products = [n * m for n, m in zip(binary.bits_to_ints(n_bits), binary.bits_to_ints(m_bits))]
        bits = binary.ints_to_bits(products, length)
        # The original benchmark's answer for an input without a second operand: L - 1 zeros.
        lengths = np.where(has_sep, binary.minimal_lengths(bits), length - 1)
        bits[~has_sep] = 0
        return binary.terminated_answer(bits, lengths, length)

    def decode_input(self, tokens) -> str:
        return binary.decode_operands(tokens, "*")

    def decode_output(self, tokens) -> str:
        return decode_terminated(tokens, self.output_symbols)
