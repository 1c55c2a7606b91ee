"""Train a CHE model (one length per step from U{1..N}, Adam, global grad-norm clipping), then
evaluate every length 1..M. Resumable: the checkpoint holds the model, the optimiser and every
random stream, so an interrupted run continued from its checkpoint ends with the same numbers as
an uninterrupted one."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from lengen import io
from lengen.positions import test_sampler
from lengen.training.config import TrainConfig
from lengen.training.evaluation import band_table, evaluate_lengths, masked_accuracy_counts, score
from lengen.training.optim import fused_optimizer_ok
from lengen.training.plots import plot_accuracy
from lengen.training.run_dir import RunDir
from lengen.training.setup import RunParts, build_run, total_length


def _rng_state(np_rng, gen) -> dict:
    return {"numpy": np_rng.bit_generator.state, "positions": gen.get_state(),
            "torch": torch.get_rng_state()}


def _restore_rng(state: dict, np_rng, gen) -> None:
    np_rng.bit_generator.state = state["numpy"]
    gen.set_state(state["positions"])
    torch.set_rng_state(state["torch"])


class Window:
    """Running means of loss and accuracy between two log lines (saved with checkpoints)."""

    def __init__(self, state: dict | None = None):
        self.__dict__.update(state or {"loss": 0.0, "correct": 0, "count": 0, "steps": 0})

    def add(self, loss: float, correct: int, count: int) -> None:
        self.loss += loss
        self.correct += correct
        self.count += count
        self.steps += 1

    def row(self, step: int) -> dict:
        return {"step": step, "loss": self.loss / max(self.steps, 1),
                "accuracy": self.correct / max(self.count, 1)}


def train_step(parts: RunParts, cfg: TrainConfig, optimizer, np_rng, gen):
    length = int(np_rng.integers(1, cfg.train_length + 1))
    batch = parts.task.sample(cfg.batch_size, length, np_rng)
    out_len = parts.task.output_length(length)
    positions = parts.train_sampler(total_length(parts.task, length), gen)
    logits = parts.model(batch.inputs, out_len, positions)
    # Loss on every output position (terminator padding included), accuracy on the mask.
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.targets.reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(parts.model.parameters(), cfg.grad_clip)
    optimizer.step()
    correct, count = masked_accuracy_counts(logits.detach(), batch.targets, batch.mask)
    return float(loss.detach()), correct, count


def train(cfg: TrainConfig, out: str | Path, progress: bool = True, evaluate: bool = True) -> dict:
    """Train (or resume) the run in `out`, then evaluate and write eval.json and accuracy.png."""
    torch.manual_seed(cfg.seed)  # before the model is built: the seed fixes the initial weights
    parts = build_run(cfg)
    run = RunDir(out)
    run.claim(cfg.to_dict(), identity_keys=TrainConfig.IDENTITY)
    model = parts.model
    # fused: one kernel for all parameters, ~3x cheaper than the default for this many small tensors
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8,
                                 fused=fused_optimizer_ok(model))
    np_rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    step, metrics, window = 0, [], Window()

    ckpt = run.load_checkpoint()
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        _restore_rng(ckpt["rng"], np_rng, gen)
        step, window = ckpt["step"], Window(ckpt["window"])
        metrics = [m for m in run.read_metrics() if m["step"] <= step]

    def checkpoint():
        run.save_checkpoint({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "rng": _rng_state(np_rng, gen), "window": dict(window.__dict__),
                             "config": cfg.to_dict()}, metrics)

    model.train()
    bar = tqdm(total=cfg.steps, initial=step, desc=f"train {cfg.task} {cfg.model.pe}/{cfg.positions}",
               disable=not progress, dynamic_ncols=True)
    start = time.perf_counter()
    while step < cfg.steps:
        loss, correct, count = train_step(parts, cfg, optimizer, np_rng, gen)
        window.add(loss, correct, count)
        step += 1
        bar.update(1)
        if step % cfg.log_every == 0 or step == cfg.steps:
            row = window.row(step)
            row["seconds"] = round(time.perf_counter() - start, 3)
            metrics.append(row)
            bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['accuracy']:.3f}")
            window = Window()
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            checkpoint()
    bar.close()
    if ckpt is None and cfg.steps == 0:
        checkpoint()
    if not evaluate:
        return {}
    return evaluate_run(run, parts=parts, cfg=cfg, progress=progress)


def evaluate_run(run: RunDir, parts: RunParts | None = None, cfg: TrainConfig | None = None,
                 test_mode: str | None = None, max_length: int | None = None,
                 eval_samples: int | None = None, progress: bool = True, suffix: str = "") -> dict:
    """Evaluate the checkpoint of `run` at lengths 1..max_length; write eval{suffix}.json and
    accuracy{suffix}.png. Returns the eval record."""
    cfg = cfg or TrainConfig.from_dict(run.read_config())
    max_length = max_length or cfg.max_length
    if parts is None or test_mode is not None or max_length != cfg.max_length:
        loaded = parts.model if parts is not None else None
        parts = build_run(cfg, test_mode=test_mode, max_length=max_length)
        if loaded is not None:
            parts.model = loaded
        else:
            ckpt = run.load_checkpoint()
            if ckpt is None:
                from lengen.errors import LengenError

                raise LengenError(f"{run.path} has no checkpoint yet; train it first")
            parts.model.load_state_dict(ckpt["model"])
    sampler = test_sampler(parts.test_mode, cfg.model.max_position)
    samples = eval_samples or cfg.eval_samples
    lengths = range(1, max_length + 1)
    bar = tqdm(total=len(lengths), desc=f"eval ({parts.test_mode} positions)", disable=not progress,
               dynamic_ncols=True)
    acc = evaluate_lengths(parts.model, parts.task, lengths, sampler, samples, cfg.eval_seed,
                           cfg.eval_tokens, progress=bar)
    bar.close()
    record = {
        "task": cfg.task, "pe": cfg.model.pe, "positions": cfg.positions,
        "test_positions": parts.test_mode, "train_length": cfg.train_length, "max_length": max_length,
        "eval_samples": samples, "eval_seed": cfg.eval_seed,
        "score": score(acc, cfg.train_length),
        "accuracy_in_train_range": float(np.mean([a for n, a in acc.items() if n <= cfg.train_length])),
        "bands": [{"lengths": label, "accuracy": a} for label, a in band_table(acc, cfg.train_length)],
        "accuracy_by_length": {str(n): a for n, a in acc.items()},
    }
    io.write_json(run.file(f"eval{suffix}.json"), record)
    plot_accuracy({f"{cfg.model.pe} / {cfg.positions} (test: {parts.test_mode})": acc}, cfg.train_length,
                  run.file(f"accuracy{suffix}.png"), title=cfg.task)
    return record
