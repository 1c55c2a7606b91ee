"""Bucket sort (context-sensitive)."""

from __future__ import annotations

import numpy as np

from lengen.tasks.base import Task, full_mask


class BucketSort(Task):
    """Symbols 0-4; target = the input sorted ascending. `24141 -> 11244`."""

    name = "bucket_sort"
    level = "CS"
    permutation_invariant = True
    input_vocab_size = 5
    output_vocab_size = 5
    input_symbols = output_symbols = ("0", "1", "2", "3", "4")

    def output_length(self, length: int) -> int:
        return length

    def solve(self, inputs):
        targets = np.sort(np.asarray(inputs), axis=1)
        return targets, full_mask(targets)
