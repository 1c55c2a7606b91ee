"""Model-agnostic scoring. The protocols talk to a model only through

    nll_fn(ids: LongTensor [B, T], last: int) -> Tensor [B, last]

the negative log-likelihood (nats) of each of the final `last` tokens of ids, each predicted from
all tokens before it. The model never needs to process the final token (it is only a target), so
a window of L + 1 tokens is a context of exactly L tokens. Build one from any

    logits_fn(input_ids: LongTensor [B, T]) -> logits [B, T, V]   (logits at t predict token t + 1)

with nll_from_logits; a model with a huge vocabulary can instead pass its own nll_fn that applies
the output head only at the scored positions. Sequences are lists of ids, numpy arrays or tensors."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from lengen.errors import LengenError

LogitsFn = Callable[[torch.Tensor], torch.Tensor]
NllFn = Callable[[torch.Tensor, int], torch.Tensor]
Tokens = Sequence[int]


def as_tensor(tokens: Tokens) -> torch.Tensor:
    if isinstance(tokens, torch.Tensor):
        return tokens.long().cpu()
    if isinstance(tokens, np.ndarray):
        return torch.from_numpy(tokens.astype(np.int64))
    return torch.tensor(list(tokens), dtype=torch.long)


def nll_of_targets(logits: torch.Tensor, targets: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """-log p(target) per position in float64, [B, T]; log-softmax in chunks of positions so a
    large vocabulary does not need a second full-size float32 copy of the logits."""
    out = []
    for s in range(0, logits.shape[1], chunk):
        lp = logits[:, s:s + chunk].float().log_softmax(-1)
        out.append(-lp.gather(-1, targets[:, s:s + chunk, None].to(lp.device))[..., 0].double())
    return torch.cat(out, dim=1).cpu()


def nll_from_logits(logits_fn: LogitsFn) -> NllFn:
    """An nll_fn from a logits_fn: one forward pass over ids[:, :-1] (the context), scoring the
    final `last` targets."""

    def nll(ids: torch.Tensor, last: int) -> torch.Tensor:
        logits = logits_fn(ids[:, :-1])
        if logits.shape[:2] != ids[:, :-1].shape:
            raise LengenError(f"logits_fn returned shape {tuple(logits.shape)} for input {tuple(ids[:, :-1].shape)}")
        return nll_of_targets(logits[:, -last:], ids[:, -last:])

    return nll


def score_windows(nll_fn: NllFn, windows: list[torch.Tensor], score_last: int | None = None,
                  batch_size: int = 1) -> tuple[float, int]:
    """Sum of NLL and number of scored tokens over equal-length windows of L + 1 tokens: one
    forward pass per window (no sliding), scoring its last `score_last` targets (all L when None)."""
    total, count = 0.0, 0
    for s in range(0, len(windows), batch_size):
        batch = torch.stack(windows[s:s + batch_size])
        k = batch.shape[1] - 1 if score_last is None else score_last
        nll = torch.as_tensor(nll_fn(batch, k)).double().reshape(batch.shape[0], k)
        total += float(nll.sum())
        count += nll.numel()
    return total, count
