"""Perplexity against context length, two ways.

perplexity_vs_length (`--protocol ppl`): at context length L, each sequence's first L + 1 tokens
    are one window; one forward pass over tokens 0..L-1 scores targets 1..L, all of them
    (no sliding window, no stride). PPL = exp(total NLL / total scored tokens), token-weighted.
    Longer contexts add easier late positions AND harder out-of-distribution ones, so the
    number mixes both effects.

last_segment_perplexity (`--protocol last-segment`, the ReRoPE / seed-review protocol): at
    context length L, each sequence's LAST L + 1 tokens are the window, but only its final K
    targets are scored. Every L scores exactly the same K tokens of every sequence; only the
    context in front of them grows, so a lower number means the extra context helped."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import torch

from lengen.errors import LengenError
from lengen.protocols.scoring import NllFn, Tokens, as_tensor, score_windows


@dataclass
class PplPoint:
    length: int        # context length L (tokens in the forward pass)
    nll: float         # mean negative log-likelihood per scored token, nats
    tokens: int        # scored tokens, summed over sequences
    docs: int          # sequences

    @property
    def ppl(self) -> float:
        return math.exp(self.nll)

    def row(self) -> dict:
        return {"length": self.length, "ppl": self.ppl, **{k: v for k, v in asdict(self).items() if k != "length"}}


def _check(sequences: Sequence[Tokens], lengths: Sequence[int]) -> None:
    if len(sequences) == 0:
        raise LengenError("no evaluation sequences")
    if not lengths or min(lengths) < 1:
        raise LengenError(f"context lengths must be >= 1, got {list(lengths)}")
    short = min(len(s) for s in sequences)
    if short < max(lengths) + 1:
        raise LengenError(f"a sequence has {short} tokens; context length {max(lengths)} needs "
                          f"{max(lengths) + 1} (the inputs plus one target)")


def perplexity_vs_length(nll_fn: NllFn, sequences: Sequence[Tokens], lengths: Sequence[int],
                         batch_size: int = 1, progress=None) -> list[PplPoint]:
    _check(sequences, lengths)
    seqs = [as_tensor(s) for s in sequences]
    points = []
    for L in lengths:
        total, count = score_windows(nll_fn, [s[: L + 1] for s in seqs], None, batch_size)
        points.append(PplPoint(L, total / count, count, len(seqs)))
        if progress is not None:
            progress.update(1)
    return points


def last_segment_perplexity(nll_fn: NllFn, sequences: Sequence[Tokens], lengths: Sequence[int],
                            segment: int, batch_size: int = 1, progress=None,
                            prefix: Sequence[int] = ()) -> list[PplPoint]:
    """`prefix`: tokens every sequence begins with (a tokenizer's BOS) and every window keeps:
    the window of length L is the prefix, then the final L + 1 - len(prefix) tokens."""
    _check(sequences, lengths)
    if not 1 <= segment <= min(lengths):
        raise LengenError(f"segment {segment} must be in 1..{min(lengths)} (the shortest context length)")
    seqs = [as_tensor(s) for s in sequences]
    head = as_tensor(list(prefix)) if prefix else None
    if head is not None and any(not torch.equal(s[:len(head)], head) for s in seqs):
        raise ValueError("every sequence must begin with the prefix")
    points = []
    for L in lengths:
        windows = [s[len(s) - L - 1:] for s in seqs]
        if head is not None:
            windows = [torch.cat([head, w[len(head):]]) for w in windows]
        total, count = score_windows(nll_fn, windows, segment, batch_size)
        points.append(PplPoint(L, total / count, count, len(seqs)))
        if progress is not None:
            progress.update(1)
    return points
