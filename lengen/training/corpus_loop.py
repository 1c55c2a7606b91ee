"""The resumable corpus-training loop of the byte-level language models: the decoder LM
(lengen.lm.train) and the masked LM (lengen.mlm.train) run this one loop and differ only in their
`CorpusObjective` (how a step's batch is drawn and scored, any extra random stream, the progress
readout, the final validation); arithmetic models (lengen.arith.train) run it too. It knows no
model kind: each caller brings its config, model and objective.

Each step: set the learning rate (lr_at), draw and score a batch, clip, AdamW step. The loss sum
stays on the device (float64) and is read back only for a metrics row or a checkpoint, so a step
never waits for the GPU. The checkpoint holds the model, the optimiser and every random stream
(numpy's window draws, the objective's generators, torch's global and CUDA generators), so a
resumed run ends with the same weights as an uninterrupted one. At the end eval.json records the
objective's validation next to the run's size and training loss."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from lengen import io
from lengen.devices import restore_rng_state, rng_state
from lengen.environment import run_environment
from lengen.errors import LengenError, reason
from lengen.options import check_finite_fields
from lengen.progress import progress_bar
from lengen.training import deadline
from lengen.training.optim import fused_optimizer_ok
from lengen.training.run_dir import RunDir, config_digest, record_mismatch
from lengen.training.session import TrainingSession

EVAL_FILE = "eval.json"


def check_corpus_run_numbers(cfg) -> None:
    """The range checks every corpus-trained run config (LMConfig, MLMConfig) shares: sizes and
    intervals >= 1, steps, warmup and weight-decay >= 0, lr and grad-clip > 0, seed >= 0, val-fraction in (0, 1),
    and every number finite (first: NaN passes every range check, nan <= 0 is False)."""
    check_finite_fields(cfg)
    for name in ("batch_size", "train_length", "checkpoint_every", "log_every", "val_windows"):
        if getattr(cfg, name) < 1:
            raise LengenError(f"{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    for name in ("steps", "warmup", "weight_decay"):  # a negative decay pushes weights away from 0
        if getattr(cfg, name) < 0:
            raise LengenError(f"{name.replace('_', '-')} must be >= 0, got {getattr(cfg, name)}")
    if cfg.lr <= 0:
        raise LengenError(f"lr must be > 0, got {cfg.lr}")
    if cfg.seed < 0:
        raise LengenError(f"seed must be >= 0, got {cfg.seed}")
    if not cfg.grad_clip > 0:
        raise LengenError(f"grad-clip must be > 0, got {cfg.grad_clip}")
    if not 0.0 < cfg.val_fraction < 1.0:
        raise LengenError(f"val-fraction must be in (0, 1), got {cfg.val_fraction}")


def lr_at(step: int, cfg) -> float:
    """Linear warmup to cfg.lr, then cosine decay to 10% of it at cfg.steps."""
    if cfg.warmup and step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, t))))


def make_optimizer(model: torch.nn.Module, cfg) -> torch.optim.Optimizer:
    """AdamW with weight decay on the matrices only (not on biases, norms and other vectors)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), fused=fused_optimizer_ok(model))


@dataclass
class CorpusObjective:
    """What one kind of language model brings to train_on_corpus."""

    #: the step's loss on the device: draws its windows with the numpy generator it is given (the
    #: loop's, checkpointed), anything else from `generators`
    batch_loss: Callable[[np.random.Generator], torch.Tensor]
    #: eval.json's validation numbers for the trained model (first in the record)
    validate: Callable[[], dict]
    #: progress-bar label
    label: str
    #: the progress bar's readout of a metrics row's loss next to it (ppl, bits per byte)
    readout: Callable[[float], dict[str, str]]
    #: what the run is, in eval.json after "parameters" ({"pe": ...})
    describe: dict
    #: further random streams, saved in the checkpoint's rng under these names
    generators: dict[str, torch.Generator] = field(default_factory=dict)


def train_on_corpus(cfg, out: str | Path, model: torch.nn.Module, device: torch.device, corpus,
                    objective: CorpusObjective, progress: bool = True,
                    on_log: Callable[[int, dict], None] | None = None,
                    note: Callable[[str], None] | None = print) -> dict:
    """Train (or resume) `model` (already on `device`) in run directory `out` for cfg.steps; write
    eval.json and return its record. `cfg` is an LMConfig or MLMConfig: its class checks a saved
    config.json. `on_log(step, row)` is called with every metrics row (sweeps report progress
    through it); `note(line)` when the run's eval.json is there but damaged or another run's (it is
    written again, never read)."""
    config_class = type(cfg)
    session = TrainingSession(RunDir(out), cfg.to_dict(), config_class.IDENTITY, cfg.steps,
                              normalize=lambda saved: config_class.from_dict(saved, where=str(out)).to_dict())
    optimizer = make_optimizer(model, cfg)
    np_rng = np.random.default_rng(cfg.seed)
    # losses since the last metrics row: their sum stays on the device (float64), read back only
    # for a row or a checkpoint
    loss_sum, loss_count = torch.zeros((), dtype=torch.float64, device=device), 0

    ckpt = session.restore(model, optimizer)  # read onto the CPU, loaded onto the model's device
    old = session.run.file(EVAL_FILE)
    if note is not None and ckpt is not None and old.exists():  # a rerun: say what it replaces, and why
        try:
            why = record_mismatch(io.read_json(old), {"config_digest": config_digest(cfg), "steps": cfg.steps})
        except (OSError, ValueError) as e:
            why = f"damaged ({reason(e)})"
        if why is not None:
            note(f"{old} is {why}; validating the run again from its checkpoint")
    if ckpt is not None:
        np_rng.bit_generator.state = ckpt["rng"]["numpy"]
        for name, gen in objective.generators.items():
            gen.set_state(ckpt["rng"][name])
        restore_rng_state(ckpt["rng"], device)  # checkpoints from before devices have no "cuda"
        if "loss_sum" in ckpt:
            loss_sum.fill_(ckpt["loss_sum"])
            loss_count = ckpt["loss_count"]
        else:  # older (decoder LM) checkpoints: the window's losses as a list
            loss_sum.fill_(float(np.sum(ckpt["window"], dtype=np.float64)))
            loss_count = len(ckpt["window"])

    def checkpoint():
        streams = {name: gen.get_state() for name, gen in objective.generators.items()}
        session.save(model, optimizer, rng={"numpy": np_rng.bit_generator.state, **streams, **rng_state(device)},
                     loss_sum=loss_sum.item(), loss_count=loss_count)

    model.train()
    bar = progress_bar(cfg.steps, objective.label, disable=not progress, initial=session.step, unit="step")
    while session.step < cfg.steps:
        step = session.step
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss = objective.batch_loss(np_rng)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        loss_sum += loss.detach()
        loss_count += 1
        session.step = step = step + 1
        bar.update(1)
        if step % cfg.log_every == 0 or step == cfg.steps:
            row = session.add_row({"step": step, "loss": loss_sum.item() / loss_count,  # the host sync of a row
                                   "lr": lr_at(step - 1, cfg), "tokens": step * cfg.batch_size * cfg.train_length})
            bar.set_postfix(loss=f"{row['loss']:.3f}", **objective.readout(row["loss"]))
            if on_log is not None:
                on_log(step, row)
            loss_sum.zero_()
            loss_count = 0
        deadline.checkpoint_or_stop(step, cfg.steps, cfg.checkpoint_every, checkpoint, bar)
    bar.close()
    if ckpt is None and cfg.steps == 0:
        checkpoint()
    train_seconds = session.elapsed()
    last = session.metrics[-1] if session.metrics else {}
    record = {**objective.validate(), "steps": session.step, "config_digest": config_digest(cfg),
              "parameters": model.num_parameters(),
              **objective.describe, "corpus": corpus.summary(), "train_loss": last.get("loss"),
              "train_seconds": round(train_seconds, 3),
              "environment": run_environment(next(model.parameters()).device)}
    io.write_json(session.run.file(EVAL_FILE), record)
    return record
