"""The task interface every CHE task implements (DeepMind's GeneralizationTask, in PyTorch)."""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Batch:
    """One sampled batch. `mask` marks the output positions that count for accuracy."""

    inputs: torch.Tensor   # int64 [B, L_in]
    targets: torch.Tensor  # int64 [B, output_length]
    mask: torch.Tensor     # bool  [B, output_length]


class Task(abc.ABC):
    """A generator of (input, target) pairs at a requested length.

    Subclasses set `name`, `level` ("R", "DCF" or "CS"), `input_vocab_size`, `output_vocab_size`,
    and implement `output_length` and `_sample`. `sample` validates arguments and builds the
    default all-true mask unless the task returns its own (the terminator tasks do).
    """

    name: str
    level: str
    input_vocab_size: int
    output_vocab_size: int

    @abc.abstractmethod
    def output_length(self, length: int) -> int:
        """Number of output tokens for an input of `length` tokens."""

    def input_length(self, length: int) -> int:
        """Tokens actually produced for a requested length (modular_arithmetic forces odd)."""
        return length

    @abc.abstractmethod
    def _sample(self, batch_size: int, length: int, rng: np.random.Generator):
        """Return (inputs, targets) or (inputs, targets, mask) as numpy int arrays."""

    def sample(self, batch_size: int, length: int, rng: np.random.Generator) -> Batch:
        if length < 1:
            raise ValueError(f"{self.name}: length must be >= 1, got {length}")
        if batch_size < 1:
            raise ValueError(f"{self.name}: batch_size must be >= 1, got {batch_size}")
        out = self._sample(batch_size, length, rng)
        inputs, targets = out[0], out[1]
        mask = out[2] if len(out) == 3 else np.ones(np.shape(targets), dtype=bool)
        return Batch(
            inputs=torch.as_tensor(np.asarray(inputs), dtype=torch.int64),
            targets=torch.as_tensor(np.asarray(targets), dtype=torch.int64),
            mask=torch.as_tensor(np.asarray(mask), dtype=torch.bool),
        )

    def decode_input(self, tokens) -> str:
        """Human-readable input (for `lengen tasks`). Override for tasks with symbols."""
        return " ".join(str(int(t)) for t in tokens)

    def decode_output(self, tokens) -> str:
        return " ".join(str(int(t)) for t in tokens)
