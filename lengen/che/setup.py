"""Build and cross-check the pieces of a run before any work starts, so bad combinations fail at
config time with one message (unknown names, lengths beyond max_position, float positions fed
to a lookup table)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from lengen.errors import LengenError
from lengen.models import CHEModel
from lengen.models.recurrent import build_model
from lengen.positions import (PositionSampler, build_sampler, check_positions_fit, default_test_mode,
                              evaluation_sampler)
from lengen.tasks import Task, get_task
from lengen.che.config import TrainConfig


@dataclass
class RunParts:
    task: Task
    model: nn.Module      # CHEModel, or a recurrent baseline (lengen.models.recurrent)
    train_sampler: PositionSampler
    test_mode: str


def total_length(task: Task, length: int) -> int:
    """Tokens the encoder sees for an input of `length`: input plus EMPTY output slots."""
    return task.input_length(length) + task.output_length(length)


def settle(cfg: TrainConfig) -> TrainConfig:
    """Fill in what a run derives from its config (the model's training length in tokens), in
    place, as build_run does before config.json is written; returns `cfg`."""
    cfg.model.train_tokens = cfg.model.train_tokens or total_length(get_task(cfg.task), cfg.train_length)
    return cfg


def test_mode_of(cfg: TrainConfig, asked: str | None = None) -> str:
    """The test positions a run is evaluated with: `asked`, else the config's, else the sampler's
    default; always "standard" for a recurrent model (it reads no positions)."""
    if cfg.model.recurrent:
        return "standard"
    return asked or cfg.test_positions or default_test_mode(cfg.positions)


def build_run(cfg: TrainConfig, test_mode: str | None = None, max_length: int | None = None) -> RunParts:
    cfg.validate()
    settle(cfg)
    task = get_task(cfg.task)
    try:
        sampler = build_sampler(cfg.positions, max_position=cfg.model.max_position, **cfg.position_options)
    except TypeError as e:
        raise LengenError(f"bad position options {cfg.position_options} for {cfg.positions!r}: {e}") from None
    if cfg.model.recurrent:
        return _build_recurrent(cfg, task, sampler, test_mode)
    model = CHEModel(cfg.model, task.input_vocab_size, task.output_vocab_size)  # bad encoding options: one line
    pe = model.encoder.pe
    check_positions_fit(pe, sampler, total_length(task, cfg.train_length), "training")
    mode = test_mode_of(cfg, test_mode)
    evaluator = evaluation_sampler(mode, cfg.model.max_position)
    longest = total_length(task, max_length or cfg.max_length)
    check_positions_fit(pe, evaluator, longest, f"evaluation with {mode!r} positions")
    return RunParts(task=task, model=model, train_sampler=sampler, test_mode=mode)


def _build_recurrent(cfg: TrainConfig, task: Task, sampler: PositionSampler, test_mode: str | None) -> RunParts:
    """A recurrent model reads no positions: the (standard) sampler only feeds the shared loop,
    and another test-position mode would evaluate the same thing under another name."""
    if test_mode not in (None, "standard"):
        raise LengenError(f"test positions {test_mode!r} do not apply to model {cfg.model.architecture!r} "
                          "(a recurrent model reads no positions)")
    model = build_model(cfg.model, task.input_vocab_size, task.output_vocab_size)
    return RunParts(task=task, model=model, train_sampler=sampler, test_mode=test_mode_of(cfg))
