"""Token windows for training and evaluation, all deterministic given a seed."""

from __future__ import annotations

import numpy as np

from lengen.errors import LengenError


def sample_windows(stream: np.ndarray, length: int, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """batch_size random windows of length + 1 tokens (inputs and shifted targets), [B, length+1]."""
    if len(stream) < length + 1:
        raise LengenError(f"training text has {len(stream)} tokens, fewer than one window of {length + 1}")
    starts = rng.integers(0, len(stream) - length, size=batch_size)
    return np.stack([stream[s:s + length + 1] for s in starts]).astype(np.int64)


def consecutive_windows(stream: np.ndarray, length: int, max_windows: int) -> np.ndarray:
    """Up to max_windows non-overlapping windows of length + 1 tokens from the start, [N, length+1]."""
    n = min(max_windows, len(stream) // (length + 1))
    if n < 1:
        raise LengenError(f"validation text has {len(stream)} tokens, fewer than one window of {length + 1}")
    return stream[: n * (length + 1)].reshape(n, length + 1).astype(np.int64)


def long_sequences(docs: list[np.ndarray], length: int, count: int, eos: int) -> list[np.ndarray]:
    """`count` sequences of exactly `length` tokens: first the documents that are long enough on
    their own (their first `length` tokens, in order); then, if more are needed, consecutive
    shorter documents joined by EOS. Fewer are returned when the documents run out."""
    out = [d[:length].astype(np.int64) for d in docs if len(d) >= length][:count]
    buf: list[np.ndarray] = []
    size = 0
    for d in (d for d in docs if len(d) < length):
        if len(out) >= count:
            break
        buf.append(d)
        size += len(d) + 1
        if size >= length:
            joined = np.concatenate([p for x in buf for p in (x, np.array([eos], dtype=x.dtype))])
            out.append(joined[:length].astype(np.int64))
            buf, size = [], 0
    return out
