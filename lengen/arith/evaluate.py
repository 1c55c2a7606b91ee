"""Greedy decoding over the heat map: `samples` problems in every cell up to `digits` digits, each
cell from its own random stream (numpy.random.default_rng([seed, i, j])), so any subset of cells
sees the same problems. A problem is right when the decoded tokens are its answer and EOS, exactly.
Problems are decoded in batches of equal prompt length, so no prompt is padded."""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np
import torch

from lengen.arith.batch import collate
from lengen.arith.config import ArithConfig
from lengen.arith.feed import Feeder
from lengen.arith.formats import answer_significance, encode
from lengen.arith.metrics import accuracy_by_cell, accuracy_by_length, exact_match
from lengen.arith.model import build_model
from lengen.arith.vocab import EOS
from lengen.devices import precision_context, resolve_device
from lengen.errors import LengenError
from lengen.models.config import model_label
from lengen.progress import progress_bar
from lengen.training.run_dir import RunDir


@torch.no_grad()
def greedy(model, feeder: Feeder, fmt: str, tokens: torch.Tensor, significance: torch.Tensor,
           steps: int, answer_width: torch.Tensor | None = None) -> torch.Tensor:
    """Decode `steps` tokens after the prompts tokens [B, P] (significance [B, P], the answers'
    padded widths [B, 1]); [B, steps]."""
    out = []
    for slot in range(steps):
        positions, ids = feeder(tokens, significance, answer_width=answer_width)
        nxt = model(tokens, positions.to(tokens.device), None if ids is None else ids.to(tokens.device))[:, -1].argmax(-1)
        out.append(nxt)
        if bool((torch.stack(out, 1) == EOS).any(1).all()):
            break
        place = answer_significance(fmt, slot)
        tokens = torch.cat([tokens, nxt[:, None]], 1)
        significance = torch.cat([significance, torch.full_like(nxt[:, None], 0 if place is None else place)], 1)
    return torch.stack(out, 1)


def evaluation_problems(task, digits: int, samples: int, seed: int) -> list:
    problems = []
    for cell in task.cells(digits):
        rng = np.random.default_rng([seed, *cell])
        problems += [task.problem(cell, rng) for _ in range(samples)]
    return problems


def evaluate_model(model, cfg, digits: int, samples: int, seed: int, device: torch.device,
                   progress: bool = False) -> dict:
    """The heat map up to `digits` digits of a trained model (config `cfg`): per-cell exact match,
    accuracy against length, and the in- and out-of-distribution means (cells within the training
    digits, and the rest)."""
    began = time.perf_counter()
    model.eval()
    task, feeder = cfg.build_task(), Feeder(cfg)
    problems = evaluation_problems(task, digits, samples, seed)
    encoded = [encode(p, cfg.format) for p in problems]
    groups = defaultdict(list)
    for i, e in enumerate(encoded):
        groups[e.prompt_length].append(i)
    correct = [False] * len(problems)
    bar = progress_bar(len(problems), "arith eval", disable=not progress, unit="problem")
    with precision_context(cfg.precision, device):
        for prompt_length, rows in sorted(groups.items()):
            for start in range(0, len(rows), cfg.eval_batch):
                chunk = rows[start:start + cfg.eval_batch]
                batch = collate([encoded[i] for i in chunk])
                targets = [encoded[i].tokens[prompt_length:] for i in chunk]
                steps = max(map(len, targets))
                out = greedy(model, feeder, cfg.format, batch.tokens[:, :prompt_length].to(device),
                             batch.significance[:, :prompt_length], steps, batch.answer_width).cpu().tolist()
                for i, predicted, target in zip(chunk, out, targets):
                    correct[i] = exact_match(predicted, target)
                bar.update(len(chunk))
    bar.close()
    model.train()
    by_cell = accuracy_by_cell([p.cell for p in problems], correct)
    inside = [c for c in by_cell if task.in_training(c, cfg.train_digits)]
    outside = [c for c in by_cell if c not in inside]

    def mean(cells):
        return float(np.mean([by_cell[c]["accuracy"] for c in cells])) if cells else None

    return {"test_digits": digits, "train_digits": cfg.train_digits, "samples_per_cell": samples,
            "eval_seed": seed, "cell_axes": list(task.cell_axes),
            "cells": [{"i": c[0], "j": c[1], **v} for c, v in by_cell.items()],
            "accuracy_by_length": {str(n): a for n, a in accuracy_by_length(by_cell, task.length_of).items()},
            "in_distribution": mean(inside), "out_of_distribution": mean(outside),
            "accuracy": float(np.mean(correct)), "eval_seconds": round(time.perf_counter() - began, 3)}


def evaluate_run(run_dir, digits: int | None = None, samples: int | None = None, seed: int | None = None,
                 device: str | None = None, precision: str | None = None, progress: bool = False) -> dict:
    """The heat map of the trained run in `run_dir` (its checkpoint's weights); settings left None
    are the run's own (its test digits, samples per cell, evaluation seed, device, precision)."""
    # named as `lengen arith eval` takes them: the config's names (eval-seed, ...) are train's flags
    for flag, value, least in (("--test-digits", digits, 1), ("--samples", samples, 1), ("--seed", seed, 0)):
        if value is not None and value < least:
            raise LengenError(f"{flag} must be >= {least}, got {value}")
    run = RunDir(run_dir)
    cfg = ArithConfig.from_dict(run.read_config(), where=str(run_dir))
    for name, value in (("test_digits", digits), ("eval_samples", samples), ("eval_seed", seed),
                        ("device", device), ("precision", precision)):
        if value is not None:
            setattr(cfg, name, value)
    cfg.validate(training=False)  # test digits the positions cannot reach fail here
    ckpt = run.load_checkpoint()
    if ckpt is None:
        raise LengenError(f"{run_dir} has no checkpoint yet; train it first (`lengen arith train`)")
    where = resolve_device(cfg.device)
    model = build_model(cfg)
    model.load_state_dict(ckpt["model"])
    result = evaluate_model(model.to(where), cfg, cfg.test_digits, cfg.eval_samples, cfg.eval_seed, where, progress)
    return {**result, "steps": ckpt["step"], "task": cfg.task, "pe": cfg.pe,
            "label": model_label(cfg.model, cfg.pe), "positions": cfg.positions,
            "format": cfg.format}
