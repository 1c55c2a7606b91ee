"""Stack manipulation (deterministic context-free)."""

from __future__ import annotations

import numpy as np

from lengen.tasks.base import Task, decode_terminated

POP, PUSH0, PUSH1, TERMINATOR = 2, 3, 4, 2


class StackManipulation(Task):
    """Initial stack bits (bottom to top), then actions POP / PUSH0 / PUSH1; y = final stack.

    Input ids: 0/1 stack bits, 2 POP, 3 PUSH 0, 4 PUSH 1; POP on an empty stack does nothing.
    Target: the final stack top to bottom, terminator 2, then 0 padding to L + 1 tokens; the mask
    covers the stack and the terminator. `1 1 PUSH0 POP PUSH0` -> `011|..` = [0,1,1,2,0,0].
    """

    name = "stack_manipulation"
    level = "DCF"
    input_vocab_size = 5
    output_vocab_size = 3
    input_symbols = ("0", "1", "POP", "PUSH0", "PUSH1")
    output_symbols = ("0", "1", "|")
    symbol_sep = " "

    def output_length(self, length: int) -> int:
        return length + 1

    def _sample(self, batch_size, length, rng):
        if length == 1:
            inputs = rng.integers(0, 2, size=(batch_size, 1))
        else:
            k = rng.integers(1, length, size=(batch_size, 1))  # initial stack size, U{1..L-1}
            bits = rng.integers(0, 2, size=(batch_size, length))
            actions = rng.integers(POP, PUSH1 + 1, size=(batch_size, length))
            inputs = np.where(np.arange(length) < k, bits, actions)
        return (inputs, *self.solve(inputs))

    def solve(self, inputs):
        inputs = np.asarray(inputs, dtype=np.int64)
        batch, length = inputs.shape
        rows = np.arange(batch)
        stack = np.zeros((batch, length), dtype=np.int64)
        size = np.zeros(batch, dtype=np.int64)
        # Initial bits are pushes too. A POP row also writes at `size`, above its top, harmlessly.
        for t in range(length):
            token = inputs[:, t]
            stack[rows, size] = np.where(token < 2, token, token - PUSH0)
            size = np.where(token == POP, np.maximum(size - 1, 0), size + 1)
        pos = np.arange(length + 1)
        from_top = np.take_along_axis(stack, np.clip(size[:, None] - 1 - pos, 0, length - 1), axis=1)
        targets = np.where(pos < size[:, None], from_top, np.where(pos == size[:, None], TERMINATOR, 0))
        return targets, pos <= size[:, None]

    def decode_output(self, tokens) -> str:
        return decode_terminated(tokens, self.output_symbols, sep="")
