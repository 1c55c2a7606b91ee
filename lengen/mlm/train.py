"""Train a masked LM on random windows of a corpus, resumably (lengen.training.session), with the
decoder LM's optimiser and schedule (lengen.lm.train.make_optimizer / lr_at); then score the
validation windows at the training length next to a unigram baseline (eval.json).

Random streams: numpy `np_rng` picks the windows (as the LM), one torch.Generator `gen` draws
the masks and the training positions (one position draw per sequence), torch's global generator
drives dropout. All three are in every checkpoint, so a resumed run ends with the same weights
as an uninterrupted one."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lengen import io
from lengen.data import load_corpus, sample_windows
from lengen.devices import precision_context, resolve_device, restore_rng_state, rng_state, to_device
from lengen.errors import LengenError
from lengen.lm.train import lr_at, make_optimizer
from lengen.mlm.config import MLMConfig
from lengen.mlm.masking import IGNORE, mask_tokens
from lengen.mlm.model import MaskedLM
from lengen.positions import PositionSampler, build_sampler
from lengen.positions.standard import StandardPositions
from lengen.progress import progress_bar
from lengen.training.run_dir import RunDir
from lengen.training.session import TrainingSession
from lengen.training.setup import check_positions_fit, default_test_mode

EVAL_FILE = "eval.json"


def build_model(cfg: MLMConfig) -> MaskedLM:
    torch.manual_seed(cfg.seed)  # the seed fixes the initial weights
    try:
        return MaskedLM(cfg.model)
    except LengenError:
        raise
    except (TypeError, ValueError) as e:  # an encoding option of the wrong type or value
        raise LengenError(f"encoding {cfg.model.pe!r} with options {cfg.model.pe_options}: "
                          f"{' '.join(str(e).split())}") from None


def build_train_sampler(cfg: MLMConfig) -> PositionSampler:
    try:
        return build_sampler(cfg.positions, max_position=cfg.model.max_position, **cfg.position_options)
    except TypeError as e:
        raise LengenError(f"bad position options {cfg.position_options} for {cfg.positions!r}: {e}") from None


def build_run(cfg: MLMConfig) -> tuple[MaskedLM, PositionSampler]:
    """Validate, build the model and the training sampler, and check that they fit (float
    positions need a functional encoding; a table needs a row per position): one LengenError
    before any data is loaded or anything is written."""
    cfg.validate()
    sampler = build_train_sampler(cfg)
    model = build_model(cfg)
    check_positions_fit(model.pe, sampler, cfg.train_length, f"training with {cfg.positions!r} positions")
    return model, sampler


def draw_positions(sampler: PositionSampler, length: int, batch: int, gen: torch.Generator) -> torch.Tensor:
    """Positions [B, T], one draw per sequence ([1, T] for the standard sampler, which draws nothing)."""
    if isinstance(sampler, StandardPositions):
        return sampler(length, gen)
    return torch.cat([sampler(length, gen) for _ in range(batch)])


def mlm_loss(model: MaskedLM, inputs: torch.Tensor, targets: torch.Tensor, positions: torch.Tensor,
             precision: str = "fp32") -> torch.Tensor:
    """Mean cross-entropy over the chosen (target != IGNORE) positions only; forward in
    `precision`, cross-entropy in float32."""
    with precision_context(precision, inputs.device):
        logits = model(inputs, positions)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=IGNORE)


def train_mlm(cfg: MLMConfig, out: str | Path, progress: bool = True,
              on_log: Callable[[int, dict], None] | None = None) -> dict:
    """Train (or resume) the run in `out`; write eval.json; return its record."""
    from lengen.mlm.evaluate import validate

    model, sampler = build_run(cfg)       # bad combinations fail here, before anything is loaded
    device = resolve_device(cfg.device)   # a missing GPU fails before anything is written
    corpus = load_corpus(cfg.corpus, cfg.val_fraction)
    stream = corpus.stream("train")
    if len(stream) < cfg.train_length + 1:
        raise LengenError(f"training text has {len(stream)} tokens, fewer than one window of {cfg.train_length + 1}")
    model = model.to(device)
    session = TrainingSession(RunDir(out), cfg.to_dict(), MLMConfig.IDENTITY, cfg.steps,
                              normalize=lambda saved: MLMConfig.from_dict(saved, where=str(out)).to_dict())
    optimizer = make_optimizer(model, cfg)
    np_rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    loss_sum, loss_count = torch.zeros((), dtype=torch.float64, device=device), 0

    ckpt = session.restore(model, optimizer)
    if ckpt is not None:
        np_rng.bit_generator.state = ckpt["rng"]["numpy"]
        gen.set_state(ckpt["rng"]["mlm"])
        restore_rng_state(ckpt["rng"], device)
        loss_sum.fill_(ckpt["loss_sum"])
        loss_count = ckpt["loss_count"]

    def checkpoint():
        session.save(model, optimizer, rng={"numpy": np_rng.bit_generator.state, "mlm": gen.get_state(),
                                            **rng_state(device)},
                     loss_sum=loss_sum.item(), loss_count=loss_count)

    L = cfg.train_length
    model.train()
    bar = progress_bar(cfg.steps, f"mlm train {cfg.model.pe}/{cfg.positions}", disable=not progress,
                       initial=session.step, unit="step")
    while session.step < cfg.steps:
        step = session.step
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        ids = torch.from_numpy(sample_windows(stream, L, cfg.batch_size, np_rng)[:, :L])
        inputs, targets = mask_tokens(ids, gen, cfg.mask_rate)
        positions = draw_positions(sampler, L, cfg.batch_size, gen)
        inputs, targets, positions = to_device(device, inputs, targets, positions)
        loss = mlm_loss(model, inputs, targets, positions, cfg.precision)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        loss_sum += loss.detach()
        loss_count += 1
        session.step = step = step + 1
        bar.update(1)
        if step % cfg.log_every == 0 or step == cfg.steps:
            row = session.add_row({"step": step, "loss": loss_sum.item() / loss_count,
                                   "lr": lr_at(step - 1, cfg), "tokens": step * cfg.batch_size * L})
            bar.set_postfix(loss=f"{row['loss']:.3f}", bpb=f"{row['loss'] / math.log(2):.3f}")
            if on_log is not None:
                on_log(step, row)
            loss_sum.zero_()
            loss_count = 0
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            checkpoint()
    bar.close()
    if ckpt is None and cfg.steps == 0:
        checkpoint()
    train_seconds = session.elapsed()
    last = session.metrics[-1] if session.metrics else {}
    record = {**validate(model, corpus, cfg), "steps": session.step, "parameters": model.num_parameters(),
              "pe": cfg.model.pe, "positions": cfg.positions, "corpus": corpus.summary(),
              "train_loss": last.get("loss"), "train_seconds": round(train_seconds, 3)}
    io.write_json(session.run.file(EVAL_FILE), record)
    return record


__all__ = ["train_mlm", "build_run", "build_model", "mlm_loss", "draw_positions", "default_test_mode"]
