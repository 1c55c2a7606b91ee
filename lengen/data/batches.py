"""Token windows for training and evaluation, all deterministic given a seed."""

from __future__ import annotations

from collections.abc import Iterator

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
    for _, joined in joined_short_documents(docs, length, eos):
        if len(out) >= count:
            break
        out.append(joined)
    return out


def joined_short_documents(docs: list[np.ndarray], length: int, eos: int) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """The documents shorter than `length`, in order, consecutive ones joined (each followed by
    EOS) until there are `length` tokens: (their indices, the first `length` tokens, int64). A
    remainder too short for `length` is dropped."""
    buf: list[int] = []
    size = 0
    for i, d in enumerate(docs):
        if len(d) >= length:
            continue
        buf.append(i)
        size += len(d) + 1
        if size >= length:
            joined = np.concatenate([p for j in buf for p in (docs[j], np.array([eos], dtype=docs[j].dtype))])
            yield tuple(buf), joined[:length].astype(np.int64)
            buf, size = [], 0
