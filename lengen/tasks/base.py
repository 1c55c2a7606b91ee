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
    and implement `output_length` and `solve` (plus `sample_inputs` when inputs are not uniform
    symbols, or `_sample` when they are not drawn independently of the answer). `sample`
    validates arguments and builds the default all-true mask unless the task returns its own
    (the terminator tasks do).
    """

    name: str
    level: str
    #: solvable without positional information (the seed paper's dagger: parity, cycle navigation,
    #: bucket sort)
    permutation_invariant: bool = False
    input_vocab_size: int
    output_vocab_size: int
    # Optional symbol tables for decode_input/decode_output, joined with `symbol_sep`.
    input_symbols: tuple[str, ...] | None = None
    output_symbols: tuple[str, ...] | None = None
    symbol_sep: str = ""

    @abc.abstractmethod
    def output_length(self, length: int) -> int:
        """Number of output tokens for an input of `length` tokens."""

    def input_length(self, length: int) -> int:
        """Tokens actually produced for a requested length (modular_arithmetic forces odd)."""
        return length

    def sample_inputs(self, batch_size: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """Inputs [B, length]: uniform symbols by default; tasks with structured inputs override."""
        return rng.integers(0, self.input_vocab_size, size=(batch_size, length))

    def _sample(self, batch_size: int, length: int, rng: np.random.Generator):
        """Return (inputs, targets) or (inputs, targets, mask) as numpy int arrays: by default
        sampled inputs and their `solve`; tasks whose inputs and answers are drawn together override."""
        inputs = self.sample_inputs(batch_size, length, rng)
        return (inputs, *self.solve(inputs))

    def sample(self, batch_size: int, length: int, rng: np.random.Generator) -> Batch:
        if length < 1:
            raise ValueError(f"{self.name}: length must be >= 1, got {length}")
        if batch_size < 1:
            raise ValueError(f"{self.name}: batch_size must be >= 1, got {batch_size}")
        out = self._sample(batch_size, length, rng)
        inputs, targets = out[0], out[1]
        mask = out[2] if len(out) == 3 else np.ones(np.shape(targets), dtype=bool)
        # np.array copies: solvers may return views with negative strides, which torch refuses.
        return Batch(
            inputs=torch.from_numpy(np.array(inputs, dtype=np.int64)),
            targets=torch.from_numpy(np.array(targets, dtype=np.int64)),
            mask=torch.from_numpy(np.array(mask, dtype=bool)),
        )

    def solve(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(targets, mask) for inputs [B, L]: the deterministic half of `_sample`, public for tests."""
        raise NotImplementedError(f"{self.name} has no solver")

    def decode_input(self, tokens) -> str:
        """Human-readable input (for `lengen tasks`), through `input_symbols` when set."""
        if self.input_symbols is None:
            return " ".join(str(int(t)) for t in tokens)
        return join_symbols(tokens, self.input_symbols, self.symbol_sep)

    def decode_output(self, tokens) -> str:
        if self.output_symbols is None:
            return " ".join(str(int(t)) for t in tokens)
        return join_symbols(tokens, self.output_symbols, self.symbol_sep)


def _symbol(t: int, symbols) -> str:
    return symbols[t] if 0 <= t < len(symbols) else f"<{t}>"


def join_symbols(tokens, symbols, sep: str = "") -> str:
    """Render token ids through a symbol table; ids outside it show as <id> rather than failing."""
    return sep.join(_symbol(int(t), symbols) for t in tokens)


def decode_terminated(tokens, symbols, sep: str = "", terminator: int = 2) -> str:
    """The answer, `|` for the terminator, then `.` per padding 0 (any other id after it shown as is)."""
    tokens = [int(t) for t in tokens]
    end = tokens.index(terminator) if terminator in tokens else len(tokens)
    parts = [_symbol(t, symbols) for t in tokens[:end]]
    if end < len(tokens):
        parts.append("|")
        parts += ["." if t == 0 else _symbol(t, symbols) for t in tokens[end + 1:]]
    return sep.join(parts)


def full_mask(targets: np.ndarray) -> np.ndarray:
    """Every output position counts (all tasks without a terminator)."""
    return np.ones(np.shape(targets), dtype=bool)
