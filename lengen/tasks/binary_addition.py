"""Binary addition (context-sensitive)."""

from __future__ import annotations

import numpy as np

from lengen.tasks import binary
from lengen.tasks.base import Task, decode_terminated


class BinaryAddition(Task):
    """n, separator, m as little-endian bits; target = n + m in minimal little-endian bits, the
    terminator 2, then 0s to L + 1 tokens (mask: answer and terminator). Without a separator
    (L <= 2) the answer is n. `1 + 01010` (1 + 10) -> `1101|....` = [1,1,0,1,2,0,0,0,0].
    """

    name = "binary_addition"
    level = "CS"
    input_vocab_size = 3
    output_vocab_size = 3
    output_symbols = ("0", "1", "|")

    def output_length(self, length: int) -> int:
        return length + 1

    def sample_inputs(self, batch_size, length, rng):
        return binary.sample_operands(batch_size, length, rng)

    def solve(self, inputs):
        n_bits, m_bits, _ = binary.split_operands(inputs)
        batch, length = n_bits.shape
        total = np.zeros((batch, length + 1), dtype=np.int64)
        carry = np.zeros(batch, dtype=np.int64)
        # Ripple-carry over bit positions, the batch in parallel: exact at any length.
        for i in range(length):
            s = n_bits[:, i] + m_bits[:, i] + carry
            total[:, i] = s & 1
            carry = s >> 1
        total[:, length] = carry
        return binary.terminated_answer(total, binary.minimal_lengths(total), length + 1)

    def decode_input(self, tokens) -> str:
        return binary.decode_operands(tokens, "+")

    def decode_output(self, tokens) -> str:
        return decode_terminated(tokens, self.output_symbols)
