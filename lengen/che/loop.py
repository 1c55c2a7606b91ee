"""Train a CHE model (one length per step from U{1..N}, Adam, global grad-norm clipping), then
evaluate every length 1..M. Resumable: the checkpoint holds the model, the optimiser and every
random stream, so an interrupted run continued from its checkpoint ends with the same numbers as
an uninterrupted one."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from lengen import io
from lengen.devices import precision_context, resolve_device, restore_rng_state, rng_state, to_device
from lengen.environment import run_environment
from lengen.errors import LengenError, reason
from lengen.models.config import model_label
from lengen.positions import evaluation_sampler
from lengen.progress import progress_bar
from lengen.training import deadline
from lengen.che.config import TrainConfig
from lengen.che.evaluation import band_table, evaluate_lengths, masked_accuracy_counts, score
from lengen.training.optim import che_adam
from lengen.che.plots import plot_accuracy
from lengen.training.run_dir import RunDir, config_digest, record_mismatch
from lengen.training.session import TrainingDiverged, TrainingSession  # noqa: F401 - re-exported
from lengen.che.setup import RunParts, build_run, test_mode_of, total_length


def run_rng_state(np_rng, gen, device) -> dict:
    return {"numpy": np_rng.bit_generator.state, "positions": gen.get_state(), **rng_state(device)}


def restore_run_rng(state: dict, np_rng, gen, device) -> None:
    np_rng.bit_generator.state = state["numpy"]
    gen.set_state(state["positions"])
    restore_rng_state(state, device)


class Window:
    """Running sums of loss and accuracy between two log lines. The sums stay on the model's
    device between rows, so a step never waits for the GPU; `state()` (for checkpoints) and
    `row()` read them back."""

    def __init__(self, state: dict | None = None):
        state = state or {"loss": 0.0, "correct": 0, "count": 0, "steps": 0}
        self.loss, self.correct, self.count, self.steps = (state["loss"], state["correct"], state["count"],
                                                           state["steps"])

    def add(self, loss, correct, count) -> None:
        self.loss = self.loss + loss
        self.correct = self.correct + correct
        self.count = self.count + count
        self.steps += 1

    def state(self) -> dict:
        return {"loss": float(self.loss), "correct": int(self.correct), "count": int(self.count),
                "steps": self.steps}

    def row(self, step: int) -> dict:
        s = self.state()
        return {"step": step, "loss": s["loss"] / max(s["steps"], 1),
                "accuracy": s["correct"] / max(s["count"], 1)}


def draw_step(parts: RunParts, cfg: TrainConfig, np_rng, gen):
    """One step's data: (batch, output length, positions), the length from U{1..N} and the batch
    from the numpy generator, the positions from the torch one. A member of a group draws the same."""
    length = int(np_rng.integers(1, cfg.train_length + 1))
    batch = parts.task.sample(cfg.batch_size, length, np_rng)
    out_len = parts.task.output_length(length)
    return batch, out_len, parts.train_sampler(total_length(parts.task, length), gen)


def train_step(parts: RunParts, cfg: TrainConfig, optimizer, np_rng, gen, device):
    """One step; returns (loss, correct, count) as tensors on `device` (no host sync)."""
    batch, out_len, positions = draw_step(parts, cfg, np_rng, gen)
    inputs, targets, mask, positions = to_device(device, batch.inputs, batch.targets, batch.mask, positions)
    with precision_context(cfg.precision, device):
        logits = parts.model(inputs, out_len, positions)
    # Loss on every output position (terminator padding included), accuracy on the mask.
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(parts.model.parameters(), cfg.grad_clip)
    optimizer.step()
    correct, count = masked_accuracy_counts(logits.detach(), targets, mask)
    return loss.detach(), correct, count


def train(cfg: TrainConfig, out: str | Path, progress: bool = True, evaluate: bool = True,
          on_log: Callable[[int, dict], None] | None = None, note: Callable[[str], None] | None = print) -> dict:
    """Train (or resume) the run in `out`, then evaluate and write eval.json and accuracy.png.
    `on_log(step, row)` is called with every metrics row (sweeps report progress through it);
    `note(line)` when a finished run's eval.json is damaged or another run's (evaluated again)."""
    device = resolve_device(cfg.device)  # a missing GPU fails here, before anything is written
    torch.manual_seed(cfg.seed)  # before the model is built: the seed fixes the initial weights
    parts = build_run(cfg)
    session = TrainingSession(RunDir(out), cfg.to_dict(), TrainConfig.IDENTITY, cfg.steps,
                              normalize=lambda saved: TrainConfig.from_dict(saved, where=str(out)).to_dict())
    run = session.run
    model = parts.model.to(device)
    optimizer = che_adam(model, cfg.lr)
    np_rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    window = Window()
    ckpt = session.restore(model, optimizer)
    if ckpt is not None:
        restore_run_rng(ckpt["rng"], np_rng, gen, device)
        window = Window(ckpt["window"])

    def checkpoint():
        session.save(model, optimizer, rng=run_rng_state(np_rng, gen, device), window=window.state())

    model.train()
    bar = progress_bar(cfg.steps, f"train {cfg.task} {cfg.model.pe}/{cfg.positions}", disable=not progress,
                       initial=session.step, unit="step")
    while session.step < cfg.steps:
        window.add(*train_step(parts, cfg, optimizer, np_rng, gen, device))
        session.step += 1
        step = session.step
        bar.update(1)
        if step % cfg.log_every == 0 or step == cfg.steps:
            row = session.add_row(window.row(step))  # the one host sync: a metrics row
            bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['accuracy']:.3f}")
            window = Window()
            if on_log is not None:
                on_log(step, row)
        deadline.checkpoint_or_stop(step, cfg.steps, cfg.checkpoint_every, checkpoint, bar)
    bar.close()
    if ckpt is None and cfg.steps == 0:
        checkpoint()
    if not evaluate:
        return {}
    if session.step == session.resumed_at:  # nothing trained in this call: reuse a finished evaluation
        previous = reusable_eval(run, cfg, parts.test_mode, device, session.step, note)
        if previous is not None:
            return previous
    return evaluate_run(run, parts=parts, cfg=cfg, progress=progress, train_seconds=session.elapsed())


#: the fields of an eval.json that say which run it is (the others: how it was evaluated)
IDENTIFYING = ("config_digest", "task", "pe", "positions", "train_length")


def expected_eval(cfg: TrainConfig, test_mode: str | None = None) -> dict:
    """What the run's own eval.json (its default evaluation) says of the run and its settings:
    lengen.training.run_dir.record_mismatch checks a record read back against it."""
    test_mode = test_mode or test_mode_of(cfg)   # build_run's choice, without building the model
    return {"config_digest": config_digest(cfg), "task": cfg.task, "pe": cfg.model.pe, "positions": cfg.positions,
            "train_length": cfg.train_length, "steps": cfg.steps, "max_length": cfg.max_length,
            "eval_samples": cfg.eval_samples, "eval_seed": cfg.eval_seed, "eval_tokens": cfg.eval_tokens,
            "test_positions": test_mode, "precision": cfg.precision}


def reusable_eval(run: RunDir, cfg: TrainConfig, test_mode: str, device, step: int,
                  note: Callable[[str], None] | None = None) -> dict | None:
    """The run's eval.json when it is this run's and every setting that shapes an evaluation
    matches, else None. `note(line)` is told when a file is there but damaged or another run's."""
    path = run.file("eval.json")
    try:
        previous = io.read_json(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        if note is not None:
            note(f"{path} is damaged ({reason(e)}); evaluating the run again")
        return None
    expected = {**expected_eval(cfg, test_mode), "steps": step, "device": str(device)}
    why = record_mismatch(previous, {k: expected[k] for k in IDENTIFYING})
    if why is None:  # this run's: reused when its evaluation settings are the ones asked for
        return previous if record_mismatch(previous, expected) is None else None
    if note is not None:
        note(f"{path} is {why}; evaluating the run again")
    return None


def load_trained(run: RunDir, cfg: TrainConfig, test_mode: str | None = None,
                 max_length: int | None = None) -> RunParts:
    """The run's parts (build_run's checks for these lengths and test positions first) with the
    checkpoint's weights loaded; LengenError when there is no checkpoint yet."""
    parts = build_run(cfg, test_mode=test_mode, max_length=max_length)
    ckpt = run.load_checkpoint()
    if ckpt is None:
        raise LengenError(f"{run.path} has no checkpoint yet; train it first")
    parts.model.load_state_dict(ckpt["model"])
    return parts


def evaluate_run(run: RunDir, parts: RunParts | None = None, cfg: TrainConfig | None = None,
                 test_mode: str | None = None, max_length: int | None = None,
                 eval_samples: int | None = None, progress: bool = True, suffix: str = "",
                 train_seconds: float | None = None, group_size: int | None = None) -> dict:
    """Evaluate the checkpoint of `run` at lengths 1..max_length on cfg.device in cfg.precision;
    write accuracy{suffix}.png, then eval{suffix}.json (last: its presence means the evaluation
    finished). Returns the eval record; `group_size`, recorded when given: how many models
    trained together with this one (lengen.che.group), which changes its float sums."""
    cfg = cfg or TrainConfig.from_dict(run.read_config(), where=str(run.path))
    device = resolve_device(cfg.device)
    max_length = max_length or cfg.max_length
    if parts is None:
        parts = load_trained(run, cfg, test_mode=test_mode, max_length=max_length)
    elif test_mode is not None or max_length != cfg.max_length:
        loaded = parts.model
        parts = build_run(cfg, test_mode=test_mode, max_length=max_length)
        parts.model = loaded
    parts.model.to(device)
    sampler = evaluation_sampler(parts.test_mode, cfg.model.max_position)
    samples = eval_samples or cfg.eval_samples
    lengths = range(1, max_length + 1)
    bar = progress_bar(len(lengths), f"eval ({parts.test_mode} positions)", disable=not progress,
                       unit="length")
    start = time.perf_counter()
    with precision_context(cfg.precision, device):
        acc = evaluate_lengths(parts.model, parts.task, lengths, sampler, samples, cfg.eval_seed,
                               cfg.eval_tokens, progress=bar)
    bar.close()
    record = {
        "task": cfg.task, "model": cfg.model.architecture, "pe": cfg.model.pe, "label": model_label(cfg.model),
        "positions": cfg.positions, "test_positions": parts.test_mode, "train_length": cfg.train_length,
        "max_length": max_length,
        "eval_samples": samples, "eval_seed": cfg.eval_seed, "eval_tokens": cfg.eval_tokens,
        "steps": cfg.steps, "config_digest": config_digest(cfg),
        "score": score(acc, cfg.train_length),
        "accuracy_in_train_range": float(np.mean([a for n, a in acc.items() if n <= cfg.train_length])),
        "bands": [{"lengths": label, "accuracy": a} for label, a in band_table(acc, cfg.train_length)],
        "accuracy_by_length": {str(n): a for n, a in acc.items()},
        "device": str(device), "precision": cfg.precision,
        "eval_seconds": round(time.perf_counter() - start, 3),
        "environment": run_environment(device),
    }
    if train_seconds is not None:
        record["train_seconds"] = train_seconds
    if group_size is not None:
        record["group_size"] = group_size
    plot_accuracy({f"{model_label(cfg.model)} / {cfg.positions} (test: {parts.test_mode})": acc}, cfg.train_length,
                  run.file(f"accuracy{suffix}.png"), title=cfg.task)
    io.write_json(run.file(f"eval{suffix}.json"), record)
    return record
