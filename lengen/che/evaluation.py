"""Per-length accuracy: every length 1..M, a fixed number of samples per length drawn from a
fixed evaluation seed (so any subset of lengths sees the same data), masked pooled accuracy."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import torch

from lengen.devices import to_device
from lengen.positions import PositionSampler
from lengen.tasks import Task


def length_generator(eval_seed: int, length: int):
    """Independent numpy and torch streams per (seed, length)."""
    rng = np.random.default_rng([eval_seed, length])
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    return rng, gen


def masked_accuracy_counts(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor):
    """(correct, counted) as 0-d tensors on the logits' device: reading them is the caller's sync."""
    correct = (logits.argmax(-1) == targets) & mask
    return correct.sum(), mask.sum()


@torch.inference_mode()
def accuracy_at_length(model, task: Task, length: int, sampler: PositionSampler, samples: int,
                       eval_seed: int, eval_tokens: int) -> float:
    """Batches are drawn on the CPU (the same data on every device) and moved to the model's
    device; the counts stay there until the length is done."""
    device = next(model.parameters()).device
    rng, gen = length_generator(eval_seed, length)
    out_len = task.output_length(length)
    total = task.input_length(length) + out_len
    batch = max(1, min(samples, eval_tokens // total))
    correct = count = 0
    for start in range(0, samples, batch):
        b = task.sample(min(batch, samples - start), length, rng)
        # One position draw per batch, as in training (the paper's `random` test mode).
        pos = sampler(total, gen)
        inputs, targets, mask, pos = to_device(device, b.inputs, b.targets, b.mask, pos)
        logits = model(inputs, out_len, pos)
        c, n = masked_accuracy_counts(logits, targets, mask)
        correct, count = correct + c, count + n
    return int(correct) / max(int(count), 1)


def evaluate_lengths(model, task: Task, lengths: Iterable[int], sampler: PositionSampler, samples: int,
                     eval_seed: int, eval_tokens: int, progress=None) -> dict[int, float]:
    was_training = model.training
    model.eval()
    results = {}
    try:
        for length in lengths:
            results[length] = accuracy_at_length(model, task, length, sampler, samples, eval_seed, eval_tokens)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(length=length, acc=f"{results[length]:.3f}")
    finally:
        model.train(was_training)
    return results


def score(accuracy_by_length: dict[int, float], train_length: int) -> float | None:
    """The seed paper's score: mean accuracy over lengths N+1..M (None if there are none)."""
    beyond = [a for length, a in accuracy_by_length.items() if length > train_length]
    return float(np.mean(beyond)) if beyond else None


def band_table(accuracy_by_length: dict[int, float], train_length: int, bands: int = 4):
    """(label, mean accuracy) for the training range and equal bands beyond it."""
    rows = []
    inside = [a for n, a in accuracy_by_length.items() if n <= train_length]
    if inside:
        rows.append((f"1-{train_length} (train)", float(np.mean(inside))))
    beyond = sorted(n for n in accuracy_by_length if n > train_length)
    if beyond:
        for chunk in np.array_split(np.array(beyond), min(bands, len(beyond))):
            rows.append((f"{chunk[0]}-{chunk[-1]}", float(np.mean([accuracy_by_length[int(n)] for n in chunk]))))
    return rows
