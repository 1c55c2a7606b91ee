"""Missing duplicate string (context-sensitive)."""

from __future__ import annotations

import numpy as np

from lengen.tasks.base import Task, full_mask

MASKED, PAD = 2, 3


class MissingDuplicateString(Task):
    """A bit string written twice with one bit masked; y = the masked bit.

    Ids: 0/1 bits, 2 masked slot, 3 pad (appended when L is odd). L = 1: x = [1], y = 1.
    `1_11.` = [1,2,1,1,3] -> 1.
    """

    name = "missing_duplicate_string"
    level = "CS"
    input_vocab_size = 4
    output_vocab_size = 2
    input_symbols = ("0", "1", "_", ".")
    output_symbols = ("0", "1")

    def output_length(self, length: int) -> int:
        return 1

    def _sample(self, batch_size, length, rng):
        if length == 1:
            inputs = np.ones((batch_size, 1), dtype=np.int64)
            return (inputs, *self.solve(inputs))
        half = length // 2
        bits = rng.integers(0, 2, size=(batch_size, half))
        inputs = np.concatenate([bits, bits], axis=1)
        inputs[np.arange(batch_size), rng.integers(0, 2 * half, size=batch_size)] = MASKED
        if length % 2:
            inputs = np.concatenate([inputs, np.full((batch_size, 1), PAD)], axis=1)
        return (inputs, *self.solve(inputs))

    def solve(self, inputs):
        inputs = np.asarray(inputs, dtype=np.int64)
        batch, length = inputs.shape
        if length == 1:
            targets = np.ones((batch, 1), dtype=np.int64)
            return targets, full_mask(targets)
        half = length // 2
        masked = inputs[:, : 2 * half] == MASKED
        if not np.all(masked.sum(axis=1) == 1):
            raise ValueError("missing_duplicate_string: each input needs exactly one masked slot")
        twin = (np.argmax(masked, axis=1) + half) % (2 * half)
        targets = inputs[np.arange(batch), twin][:, None]
        return targets, full_mask(targets)
