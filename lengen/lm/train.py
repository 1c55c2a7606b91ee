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
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lengen.data import consecutive_windows, load_corpus, sample_windows
from lengen.data.tokenizer import ByteTokenizer
from lengen.devices import precision_context, resolve_device, to_device
from lengen.errors import LengenError
from lengen.lm.config import LMConfig
from lengen.lm.options import lm_config_from_options, lm_option_values
from lengen.training.corpus_loop import CorpusObjective, train_on_corpus
from lengen.lm.model import DecoderLM
from lengen.models.config import model_label
from lengen.positions import PositionSampler, build_sampler, check_positions_fit, draw_positions
from lengen.protocols import perplexity_vs_length, token_counts, unigram_nll_fn
from lengen.training.run_dir import RunDir, run_id

#: model fields that say how positions are encoded: DroPE changes them (to no encoding); every
#: other model field, and the training length, must equal the source run's
POSITION_FIELDS = ("pe", "pe_options", "layer_pe", "max_position", "train_tokens")
#: options `--init-from` takes from the source run when the command line does not give them
SOURCE_OPTIONS = ("layers", "heads", "d_model", "d_ff", "dropout", "corpus", "val_fraction", "train_length")


def build_model(cfg: LMConfig) -> DecoderLM:
    torch.manual_seed(cfg.seed)  # the seed fixes the initial weights
    return DecoderLM(cfg.model, ByteTokenizer.vocab_size)


def read_source(source_dir: str | Path) -> tuple[LMConfig, dict]:
    """The config and checkpoint of a finished LM run to start from (`--init-from`): LengenError,
    one line, for a folder that is no LM run, a damaged or foreign config or checkpoint, a run
    that is not RoPE (DroPE's premise: the encoding dropped is RoPE) or not finished."""
    run = RunDir(source_dir)
    where = f"--init-from {run.path}"
    try:
        cfg = LMConfig.from_dict(run.read_config(), where=str(run.path))
        ckpt = run.load_checkpoint(cfg.to_dict(), LMConfig.IDENTITY,
                                   normalize=lambda saved: LMConfig.from_dict(saved, where=str(run.path)).to_dict())
    except LengenError as e:
        raise LengenError(f"{where}: {str(e).split('; ')[0]}") from None
    if ckpt is None or ckpt.get("step", 0) < cfg.steps:
        done = 0 if ckpt is None else ckpt.get("step", 0)
        raise LengenError(f"{where}: the run is not finished (step {done} of {cfg.steps}); finish its training first")
    if cfg.init_from is not None or not _is_rope(cfg):
        what = "itself a recalibrated run" if cfg.init_from is not None else f"pe={cfg.model.pe!r}"
        raise LengenError(f"{where}: DroPE drops RoPE from a RoPE-trained model; this run is {what}")
    return cfg, ckpt


def _is_rope(cfg: LMConfig) -> bool:
    with torch.random.fork_rng(), torch.device("meta"):  # shapes only: no memory, no draw from torch's stream
        return DecoderLM(cfg.model, ByteTokenizer.vocab_size).is_rope


def check_source(cfg: LMConfig, source: LMConfig, where: str = "--init-from") -> None:
    """`cfg` may start from `source`'s weights: the same model but for the positional encoding,
    and the same training length (DroPE recalibrates at the original length); else LengenError."""
    mine, theirs = asdict(cfg.model), asdict(source.model)
    diff = [f"{k} {theirs.get(k)!r} -> {mine.get(k)!r}" for k in sorted(set(mine) | set(theirs))
            if k not in POSITION_FIELDS and mine.get(k) != theirs.get(k)]
    if cfg.train_length != source.train_length:
        diff.append(f"train_length {source.train_length} -> {cfg.train_length}")
    if diff:
        raise LengenError(f"{where}: the model must be the source run's but for its encoding, and train at its "
                          f"training length; differs in {', '.join(diff[:4])}")


def init_record(source: LMConfig, step: int) -> dict:
    """What LMConfig.init_from records of the source run."""
    return {"run_id": run_id(source), "step": int(step), "pe": source.model.pe}


def init_config(options: dict, source_dir: str | Path) -> LMConfig:
    """`lengen lm train --init-from SOURCE_DIR`: the config from `options` (as given on the command
    line) on top of the source run's model shape and data (SOURCE_OPTIONS), checked against it,
    with init_from recording it. LengenError before any training."""
    source, ckpt = read_source(source_dir)
    inherited = {k: v for k, v in lm_option_values(source).items() if k in SOURCE_OPTIONS}
    cfg = lm_config_from_options({**inherited, **options})
    cfg.init_from = init_record(source, ckpt["step"])
    cfg.validate()
    check_source(cfg, source, f"--init-from {source_dir}")
    return cfg


def load_source_weights(model: DecoderLM, cfg: LMConfig, source_dir: str | Path) -> None:
    """Step 0 of a recalibration: the source run's weights, less its encoding's own parameters and
    buffers (the NoPE model has none); the source must be the run cfg.init_from records."""
    source, ckpt = read_source(source_dir)
    check_source(cfg, source, f"--init-from {source_dir}")
    got = init_record(source, ckpt["step"])
    if got != cfg.init_from:
        raise LengenError(f"--init-from {source_dir}: not the run this one started from ({got} is not {cfg.init_from})")
    wanted = model.state_dict()
    missing = sorted(set(wanted) - set(ckpt["model"]))
    if missing:
        raise LengenError(f"--init-from {source_dir}: its checkpoint lacks {', '.join(missing[:3])}")
    model.load_state_dict({k: ckpt["model"][k] for k in wanted})


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
             on_log: Callable[[int, dict], None] | None = None, note: Callable[[str], None] | None = print,
             init_dir: str | Path | None = None) -> dict:
    """Train (or resume) the run in `out`; write eval.json; return its record. `on_log(step, row)`
    is called with every metrics row (sweeps report progress through it); `note` as for
    lengen.training.corpus_loop.train_on_corpus. A run with cfg.init_from (DroPE's recalibration)
    starts from the weights of the finished run in `init_dir` (read only when `out` has no
    checkpoint yet: a resumed run continues from its own); the optimiser starts fresh."""
    cfg.validate()
    device = resolve_device(cfg.device)  # a missing GPU fails here, before anything is loaded or written
    corpus = load_corpus(cfg.corpus, cfg.val_fraction)  # bad corpus -> LengenError before touching `out`
    stream = corpus.stream("train")
    model = build_model(cfg)
    if cfg.init_from is not None and not RunDir(out).file(RunDir.CHECKPOINT).exists():
        if init_dir is None:
            raise LengenError(f"{out}: this run starts from run {cfg.init_from['run_id']}'s weights; give its folder "
                              "(--init-from)")
        load_source_weights(model, cfg, init_dir)
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
