"""Reference models as logits functions, scored by the same protocols as real models."""

from __future__ import annotations

import numpy as np
import torch

from lengen.protocols.scoring import LogitsFn, NllFn, nll_from_logits


def unigram_nll_fn(counts: np.ndarray) -> NllFn:
    return nll_from_logits(unigram_logits_fn(counts))


def unigram_logits_fn(counts: np.ndarray) -> LogitsFn:
    """A unigram model with add-one smoothing: p(v) = (count_v + 1) / (N + V), for every position."""
    counts = np.asarray(counts, dtype=np.float64)
    logp = torch.from_numpy(np.log((counts + 1.0) / (counts.sum() + len(counts)))).float()
    return lambda ids: logp.expand(ids.shape[0], ids.shape[1], -1)


def token_counts(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    return np.bincount(np.asarray(tokens, dtype=np.int64), minlength=vocab_size)[:vocab_size]
