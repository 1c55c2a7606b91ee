"""Train a decoder LM on random windows of a corpus (AdamW, warmup + cosine schedule, gradient
clipping), then report validation perplexity at the training length next to a unigram baseline.
Resumable like lengen.training.loop: the checkpoint holds the model, the optimiser and every random
stream, so a resumed run ends with the same weights as an uninterrupted one.

Device and precision (cfg.device, cfg.precision; lengen.devices): the model is built on the CPU
(the seed gives the same initial weights everywhere) and moved; batches are sampled on the CPU and
moved once per step; the loss stays on the device and is read back only for a metrics row or a
checkpoint, so a step never waits for the GPU."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lengen import io
from lengen.data import consecutive_windows, load_corpus, sample_windows
from lengen.data.tokenizer import ByteTokenizer
from lengen.devices import (
    precision_context,
    resolve_device,
    restore_rng_state,
    rng_state,
    to_device,
)
from lengen.lm.config import LMConfig
from lengen.lm.model import DecoderLM
from lengen.progress import progress_bar
from lengen.protocols import perplexity_vs_length, token_counts, unigram_nll_fn
from lengen.training.optim import fused_optimizer_ok
from lengen.training.run_dir import RunDir
from lengen.training.session import TrainingSession

EVAL_FILE = "eval.json"


def lr_at(step: int, cfg: LMConfig) -> float:
    """Linear warmup to cfg.lr, then cosine decay to 10% of it at cfg.steps."""
    if cfg.warmup and step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, t))))


def build_model(cfg: LMConfig) -> DecoderLM:
    torch.manual_seed(cfg.seed)  # the seed fixes the initial weights
    return DecoderLM(cfg.model, ByteTokenizer.vocab_size)


def make_optimizer(model: DecoderLM, cfg: LMConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), fused=fused_optimizer_ok(model))


def lm_loss(model: DecoderLM, batch: torch.Tensor, precision: str = "fp32") -> torch.Tensor:
    """Mean next-token cross-entropy of `batch` (on the model's device); the forward pass runs in
    `precision`, the cross-entropy in float32."""
    with precision_context(precision, batch.device):
        logits = model(batch[:, :-1])
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
            "val_tokens": model_pt.tokens, "train_length": cfg.train_length}


def train_lm(cfg: LMConfig, out: str | Path, progress: bool = True,
             on_log: Callable[[int, dict], None] | None = None) -> dict:
    """Train (or resume) the run in `out`; write eval.json; return its record. `on_log(step, row)`
    is called with every metrics row (sweeps report progress through it)."""
    cfg.validate()
    device = resolve_device(cfg.device)  # a missing GPU fails here, before anything is loaded or written
    corpus = load_corpus(cfg.corpus, cfg.val_fraction)  # bad corpus -> LengenError before touching `out`
    stream = corpus.stream("train")
    model = build_model(cfg).to(device)  # built on the CPU: the same initial weights on every device
    session = TrainingSession(RunDir(out), cfg.to_dict(), LMConfig.IDENTITY, cfg.steps,
                              normalize=lambda saved: LMConfig.from_dict(saved, where=str(out)).to_dict())
    run = session.run
    optimizer = make_optimizer(model, cfg)
    np_rng = np.random.default_rng(cfg.seed)
    # losses since the last metrics row: their sum stays on the device (float64), read back only
    # for a row or a checkpoint
    loss_sum, loss_count = torch.zeros((), dtype=torch.float64, device=device), 0

    ckpt = session.restore(model, optimizer)  # read onto the CPU, loaded onto the model's device
    if ckpt is not None:
        np_rng.bit_generator.state = ckpt["rng"]["numpy"]
        restore_rng_state(ckpt["rng"], device)  # checkpoints from before devices have no "cuda"
        if "loss_sum" in ckpt:
            loss_sum.fill_(ckpt["loss_sum"])
            loss_count = ckpt["loss_count"]
        else:  # older checkpoints: the window's losses as a list
            loss_sum.fill_(float(np.sum(ckpt["window"], dtype=np.float64)))
            loss_count = len(ckpt["window"])

    def checkpoint():
        session.save(model, optimizer, rng={"numpy": np_rng.bit_generator.state, **rng_state(device)},
                     loss_sum=loss_sum.item(), loss_count=loss_count)

    model.train()
    bar = progress_bar(cfg.steps, f"lm train {cfg.model.pe}", disable=not progress, initial=session.step,
                       unit="step")
    while session.step < cfg.steps:
        step = session.step
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        batch = torch.from_numpy(sample_windows(stream, cfg.train_length, cfg.batch_size, np_rng))
        (batch,) = to_device(device, batch)
        loss = lm_loss(model, batch, cfg.precision)
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
            bar.set_postfix(loss=f"{row['loss']:.3f}", ppl=f"{math.exp(row['loss']):.2f}")
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
              "pe": cfg.model.pe, "corpus": corpus.summary(), "train_loss": last.get("loss"),
              "train_seconds": round(train_seconds, 3)}
    io.write_json(run.file(EVAL_FILE), record)
    return record
