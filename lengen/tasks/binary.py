"""Shared pieces of the binary tasks: operand sampling for addition/multiplication, splitting an
input at its separator, and little-endian bit rows <-> Python ints (answers reach 500 bits)."""

from __future__ import annotations

import numpy as np

SEPARATOR = TERMINATOR = 2


def uniform_nonzero_bits(batch_size: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of `length` uniform bits, all-zero rows redrawn: n ~ U{1..2^length - 1}."""
    bits = rng.integers(0, 2, size=(batch_size, length))
    zero = ~bits.any(axis=1)
    while zero.any():
        bits[zero] = rng.integers(0, 2, size=(int(zero.sum()), length))
        zero = ~bits.any(axis=1)
    return bits


def sample_operands(batch_size: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """Inputs of binary addition and multiplication, int64 [B, length].

    L <= 2: n ~ U{0..2^L - 2} as L little-endian bits. L >= 3: a ~ U{1..L-2}, b = L-1-a, a bits of
    n ~ U{1..2^a-1}, the separator 2, then b bits of m ~ U{1..2^b-1}, both little-endian.
    """
    if length <= 2:
        n = rng.integers(0, 2**length - 1, size=(batch_size, 1))
        return (n >> np.arange(length)) & 1
    a = rng.integers(1, length - 1, size=(batch_size, 1))
    pos = np.arange(length)
    in_n, in_m = pos < a, pos > a
    bits = rng.integers(0, 2, size=(batch_size, length))
    # Redrawing a whole row until both operands are nonzero keeps (n, m) uniform over the nonzero
    # pairs, independently of each other.
    bad = ~(bits * in_n).any(axis=1) | ~(bits * in_m).any(axis=1)
    while bad.any():
        bits[bad] = rng.integers(0, 2, size=(int(bad.sum()), length))
        bad = ~(bits * in_n).any(axis=1) | ~(bits * in_m).any(axis=1)
    return np.where(pos == a, SEPARATOR, bits)


def split_operands(inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n_bits, m_bits, has_separator): both operands as little-endian bit rows [B, L], zero-padded.
    A row without a separator is n alone (m = 0)."""
    inputs = np.asarray(inputs, dtype=np.int64)
    batch, length = inputs.shape
    is_sep = inputs == SEPARATOR
    if np.any(is_sep.sum(axis=1) > 1):
        raise ValueError("binary operands: more than one separator in a row")
    has_sep = is_sep.any(axis=1)
    sep = np.where(has_sep, np.argmax(is_sep, axis=1), length)[:, None]
    pos = np.arange(length)
    n_bits = np.where(pos < sep, inputs, 0)
    src = sep + 1 + pos
    m_bits = np.where(src < length, np.take_along_axis(inputs, np.minimum(src, length - 1), axis=1), 0)
    return n_bits, m_bits, has_sep


def bits_to_ints(bits: np.ndarray) -> list[int]:
    """Little-endian bit rows -> Python ints."""
    packed = np.packbits(np.asarray(bits, dtype=np.uint8), axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


def ints_to_bits(values: list[int], width: int) -> np.ndarray:
    """Python ints -> little-endian bit rows [B, width]."""
    if any(v < 0 or v.bit_length() > width for v in values):
        raise ValueError(f"value does not fit in {width} bits")
    nbytes = (width + 7) // 8
    buf = b"".join(v.to_bytes(nbytes, "little") for v in values)
    packed = np.frombuffer(buf, dtype=np.uint8).reshape(len(values), nbytes)
    return np.unpackbits(packed, axis=1, bitorder="little")[:, :width].astype(np.int64)


def terminated_answer(bits: np.ndarray, lengths: np.ndarray, width: int):
    """(targets, mask) [B, width]: the first `lengths` bits of each row, the terminator 2, then 0s.
    The mask covers the answer and its terminator."""
    lengths = np.asarray(lengths, dtype=np.int64)[:, None]
    if np.any(lengths >= width):
        raise ValueError(f"answer plus terminator does not fit in {width} tokens")
    pos = np.arange(width)
    body = np.zeros((len(lengths), width), dtype=np.int64)
    k = min(width, np.shape(bits)[1])
    body[:, :k] = np.asarray(bits)[:, :k]
    targets = np.where(pos < lengths, body, np.where(pos == lengths, TERMINATOR, 0))
    return targets, pos <= lengths


def minimal_lengths(bits: np.ndarray) -> np.ndarray:
    """Length of the minimal little-endian representation of each row (0 -> [0], length 1)."""
    bits = np.asarray(bits)
    nonzero = bits != 0
    highest = bits.shape[1] - 1 - np.argmax(nonzero[:, ::-1], axis=1)
    return np.where(nonzero.any(axis=1), highest + 1, 1)


def decode_operands(tokens, operator: str) -> str:
    """`n op m` as the little-endian bit strings they are in the input."""
    return "".join({0: "0", 1: "1", SEPARATOR: operator}.get(int(t), f"<{int(t)}>") for t in tokens)
