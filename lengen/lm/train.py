"""Train a decoder LM on random windows of a corpus, then report validation perplexity at the
training length next to a unigram baseline. The loop (AdamW, warmup + cosine schedule, gradient
clipping, resumable checkpoints holding every random stream) is lengen.training.corpus_loop's; this module is
the decoder LM's part of it: next-token cross-entropy on windows drawn with the loop's numpy
generator, at the training positions (cfg.positions: 0..T-1, or a sampler's such as PoSE, one
draw per window from a torch generator saved in the checkpoint as "positions"), and the
perplexity validation (always at 0..T-1).

Device and precision (cfg.device, cfg.precision; lengen.devices): the model is built on the CPU
(the seed gives the same initial weights everywhere) and moved; batches are sampled on the CPU and
moved once per step."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lengen.data import consecutive_windows, load_corpus, sample_windows
from lengen.data.tokenizer import ByteTokenizer
from lengen.devices import precision_context, resolve_device, to_device
from lengen.errors import LengenError
from lengen.lm.config import LMConfig
from lengen.training.corpus_loop import CorpusObjective, train_on_corpus
from lengen.lm.model import DecoderLM
from lengen.models.config import model_label
from lengen.positions import PositionSampler, build_sampler, check_positions_fit, draw_positions
from lengen.protocols import perplexity_vs_length, token_counts, unigram_nll_fn


def build_model(cfg: LMConfig) -> DecoderLM:
    torch.manual_seed(cfg.seed)  # the seed fixes the initial weights
    return DecoderLM(cfg.model, ByteTokenizer.vocab_size)


def build_train_sampler(cfg: LMConfig, pe) -> PositionSampler:
    """The training position sampler, checked against the encoding `pe` (float positions need a
    functional encoding, a table a row per position, pose a target above the training length):
    one LengenError before any data is loaded."""
    try:
        sampler = build_sampler(cfg.positions, max_position=cfg.model.max_position, **cfg.position_options)
    except TypeError as e:
        raise LengenError(f"bad position options {cfg.position_options} for {cfg.positions!r}: {e}") from None
    check_positions_fit(pe, sampler, cfg.train_length, f"training with {cfg.positions!r} positions")
    return sampler


def lm_loss(model: DecoderLM, batch: torch.Tensor, precision: str = "fp32",
            positions: torch.Tensor | None = None) -> torch.Tensor:
    """Mean next-token cross-entropy of `batch` (on the model's device); the forward pass runs in
    `precision`, the cross-entropy in float32. `positions` [B|1, T-1]: the inputs' positions
    (None: 0..T-2)."""
    with precision_context(precision, batch.device):
        logits = model(batch[:, :-1], positions=positions)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


def validate(model: DecoderLM, corpus, cfg: LMConfig) -> dict:
    """Perplexity at the training length on non-overlapping validation windows, and the unigram
    model's (fit on the training documents) on the same targets."""
    windows = consecutive_windows(corpus.stream("val"), cfg.train_length, cfg.val_windows)
    with precision_context(cfg.precision, next(model.parameters()).device):  # as trained
        model_pt = perplexity_vs_length(model.nll_fn(), windows, [cfg.train_length], batch_size=8)[0]
    counts = token_counts(corpus.stream("train"), ByteTokenizer.vocab_size)
    uni_pt = perplexity_vs_length(unigram_nll_fn(counts), windows, [cfg.train_length], batch_size=64)[0]
    return {"val_ppl": model_pt.ppl, "val_nll": model_pt.nll, "unigram_ppl": uni_pt.ppl,
            "val_tokens": model_pt.tokens, "train_length": cfg.train_length,
            "val_measured_on": f"{cfg.val_windows} consecutive {cfg.train_length}-token windows of the "
                               "validation stream (most start mid-document; `lengen lm eval` scores "
                               "documents from their first token)"}


def train_lm(cfg: LMConfig, out: str | Path, progress: bool = True,
             on_log: Callable[[int, dict], None] | None = None, note: Callable[[str], None] | None = print) -> dict:
    """Train (or resume) the run in `out`; write eval.json; return its record. `on_log(step, row)`
    is called with every metrics row (sweeps report progress through it); `note` as for
    lengen.training.corpus_loop.train_on_corpus."""
    cfg.validate()
    device = resolve_device(cfg.device)  # a missing GPU fails here, before anything is loaded or written
    corpus = load_corpus(cfg.corpus, cfg.val_fraction)  # bad corpus -> LengenError before touching `out`
    stream = corpus.stream("train")
    model = build_model(cfg)
    sampler = build_train_sampler(cfg, model.decoder.pe)
    model = model.to(device)  # built on the CPU: the same initial weights on every device
    # sampled positions: one draw per window from their own generator, in the checkpoint as
    # "positions"; standard runs draw nothing and keep their checkpoints as before
    standard = cfg.positions == "standard"
    gen = torch.Generator().manual_seed(cfg.seed)

    def batch_loss(np_rng: np.random.Generator) -> torch.Tensor:
        batch = torch.from_numpy(sample_windows(stream, cfg.train_length, cfg.batch_size, np_rng))
        positions = None if standard else draw_positions(sampler, cfg.train_length, cfg.batch_size, gen)
        (batch,) = to_device(device, batch)
        return lm_loss(model, batch, cfg.precision, positions)

    label = f"lm train {cfg.model.pe}" + ("" if standard else f"/{cfg.positions}")
    objective = CorpusObjective(batch_loss=batch_loss, validate=lambda: validate(model, corpus, cfg),
                                label=label, describe={"pe": cfg.model.pe, "label": model_label(cfg.model),
                                                       "positions": cfg.positions},
                                readout=lambda loss: {"ppl": f"{math.exp(loss):.2f}"},
                                generators={} if standard else {"positions": gen})
    return train_on_corpus(cfg, out, model, device, corpus, objective, progress, on_log, note)
