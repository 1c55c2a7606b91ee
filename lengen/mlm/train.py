"""Train a masked LM on random windows of a corpus with the decoder LM's loop (lengen.training.corpus_loop:
AdamW, warmup + cosine schedule, resumable checkpoints); then score the validation windows at the
training length next to a unigram baseline (eval.json). This module is the masked LM's part:
masks, training positions and the masked-token loss.

Random streams: numpy `np_rng` (the loop's) picks the windows, as for the LM; one torch.Generator
`gen` draws the masks and the training positions (one position draw per sequence) and is saved
in the checkpoint's rng as "mlm"; torch's global generator drives dropout. All three are in every
checkpoint, so a resumed run ends with the same weights as an uninterrupted one."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lengen.data import load_corpus, sample_windows
from lengen.devices import precision_context, resolve_device, to_device
from lengen.errors import LengenError
from lengen.training.corpus_loop import CorpusObjective, train_on_corpus
from lengen.mlm.config import MLMConfig
from lengen.mlm.evaluate import validate
from lengen.mlm.masking import IGNORE, mask_tokens
from lengen.mlm.model import MaskedLM
from lengen.models.config import model_label
from lengen.positions import PositionSampler, build_sampler, check_positions_fit, default_test_mode, draw_positions


def build_model(cfg: MLMConfig) -> MaskedLM:
    torch.manual_seed(cfg.seed)  # the seed fixes the initial weights
    return MaskedLM(cfg.model)  # bad encoding options: one line from lengen.encodings


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


def mlm_loss(model: MaskedLM, inputs: torch.Tensor, targets: torch.Tensor, positions: torch.Tensor,
             precision: str = "fp32") -> torch.Tensor:
    """Mean cross-entropy over the chosen (target != IGNORE) positions only; forward in
    `precision`, cross-entropy in float32."""
    with precision_context(precision, inputs.device):
        logits = model(inputs, positions)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=IGNORE)


def train_mlm(cfg: MLMConfig, out: str | Path, progress: bool = True,
              on_log: Callable[[int, dict], None] | None = None, note: Callable[[str], None] | None = print) -> dict:
    """Train (or resume) the run in `out`; write eval.json; return its record (`note` as for
    lengen.training.corpus_loop.train_on_corpus)."""
    model, sampler = build_run(cfg)       # bad combinations fail here, before anything is loaded
    device = resolve_device(cfg.device)   # a missing GPU fails before anything is written
    corpus = load_corpus(cfg.corpus, cfg.val_fraction)
    stream = corpus.stream("train")
    if len(stream) < cfg.train_length + 1:
        raise LengenError(f"training text has {len(stream)} tokens, fewer than one window of {cfg.train_length + 1}")
    model = model.to(device)
    gen = torch.Generator().manual_seed(cfg.seed)
    L = cfg.train_length

    def batch_loss(np_rng: np.random.Generator) -> torch.Tensor:
        ids = torch.from_numpy(sample_windows(stream, L, cfg.batch_size, np_rng)[:, :L])
        inputs, targets = mask_tokens(ids, gen, cfg.mask_rate)
        positions = draw_positions(sampler, L, cfg.batch_size, gen)
        inputs, targets, positions = to_device(device, inputs, targets, positions)
        return mlm_loss(model, inputs, targets, positions, cfg.precision)

    objective = CorpusObjective(batch_loss=batch_loss, validate=lambda: validate(model, corpus, cfg),
                                label=f"mlm train {cfg.model.pe}/{cfg.positions}",
                                describe={"pe": cfg.model.pe, "label": model_label(cfg.model), "positions": cfg.positions},
                                readout=lambda loss: {"bpb": f"{loss / math.log(2):.3f}"},
                                generators={"mlm": gen})
    return train_on_corpus(cfg, out, model, device, corpus, objective, progress, on_log, note)


__all__ = ["train_mlm", "build_run", "build_model", "mlm_loss", "draw_positions", "default_test_mode"]
