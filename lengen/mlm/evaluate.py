"""Evaluate a trained masked LM against length: masked-token accuracy and bits per byte (mean
masked-token cross-entropy / ln 2) at several lengths, per test-position mode (standard /
random / uniform, lengen.positions.evaluation_sampler), with and without log-n scaled attention
switched on at test time. Writes results.csv / results.json / a plot into an output directory.

Determinism: at each length the windows (offsets from numpy default_rng(seed)), the masks and
the test positions (torch generators seeded from `seed`) depend on the seed and the length
only, so every variant and every run scores the same tokens at the same positions.

log-n at test time: ModelConfig.logit_scale is read by the attention on every forward pass, so
the evaluation sets it to "log_n" for the "+logn" variants and to the trained one otherwise ("none",
or ssmax / llama4_temperature, whose runs evaluate without the log-n variants). The factor
is log(n)/log(m) with m = ModelConfig.train_tokens = the training length (lengen.models.
logit_scaling): exactly 1 at n = m, so at the training length both variants are identical."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from lengen.data import load_corpus, sample_windows
from lengen.data.tokenizer import ByteTokenizer
from lengen.devices import check_precision, precision_context, resolve_device
from lengen.errors import LengenError, unknown_name
from lengen.io import check_writable
from lengen.mlm.config import MLMConfig
from lengen.mlm.masking import IGNORE, mask_tokens
from lengen.mlm.model import MaskedLM
from lengen.positions import TEST_MODES, PositionSampler, check_positions_fit, default_test_mode, evaluation_sampler
from lengen.progress import progress_bar
from lengen.protocols import token_counts, unigram_logits_fn, write_results
from lengen.protocols.report import pivot_table
from lengen.training.run_dir import RunDir

EVAL_SEED = 1234
LOG_N = ("off", "on", "both")


def eval_windows(stream: np.ndarray, length: int, count: int, seed: int = EVAL_SEED) -> np.ndarray:
    """`count` windows of exactly `length` tokens at random offsets of `stream`, [count, length]."""
    if len(stream) < length + 1:
        raise LengenError(f"the validation text has {len(stream)} tokens, fewer than one window of "
                          f"{length + 1}; lower the lengths or use a larger corpus")
    return sample_windows(stream, length, count, np.random.default_rng([seed, length]))[:, :length]


def eval_masks(windows: np.ndarray, rate: float, seed: int = EVAL_SEED) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of mask_tokens with a generator seeded by (seed, length)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + windows.shape[1])
    return mask_tokens(torch.from_numpy(np.ascontiguousarray(windows)), gen, rate)


def eval_positions(sampler: PositionSampler, count: int, length: int, seed: int = EVAL_SEED) -> torch.Tensor:
    """One position draw per window, [count, length] (deterministic samplers give the same rows)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + length + 1)
    return torch.cat([sampler(length, gen) for _ in range(count)])


@torch.no_grad()
def masked_scores(logits_fn, inputs: torch.Tensor, targets: torch.Tensor, positions: torch.Tensor,
                  train_length: int, batch_size: int = 16) -> dict:
    """Accuracy and bits per byte over the chosen positions (targets != IGNORE). `logits_fn(ids,
    positions)` -> logits [B, T, V]. Also the accuracy at indices < train_length (acc_first) and
    in the second half of the window (acc_last_half)."""
    T = inputs.shape[1]
    nll = correct = count = 0.0
    first = [0.0, 0.0]
    last = [0.0, 0.0]
    idx = torch.arange(T)
    for s in range(0, inputs.shape[0], batch_size):
        x, y, p = inputs[s:s + batch_size], targets[s:s + batch_size], positions[s:s + batch_size]
        logits = logits_fn(x, p).float().cpu()
        chosen = y != IGNORE
        logp = torch.log_softmax(logits, dim=-1)
        safe = y.clamp(min=0)
        tok_nll = -logp.gather(-1, safe[..., None])[..., 0]
        hit = (logits.argmax(-1) == y) & chosen
        nll += float(tok_nll[chosen].double().sum())
        correct += float(hit.sum())
        count += float(chosen.sum())
        for acc, where in ((first, idx < train_length), (last, idx >= T // 2)):
            acc[0] += float((hit & where).sum())
            acc[1] += float((chosen & where).sum())
    if count == 0:
        raise LengenError("no masked token to score")
    return {"accuracy": correct / count, "bpb": nll / count / math.log(2), "nll": nll / count,
            "acc_first": first[0] / first[1] if first[1] else math.nan,
            "acc_last_half": last[0] / last[1] if last[1] else math.nan, "masked_tokens": int(count)}


def model_logits_fn(model: MaskedLM, precision: str = "fp32"):
    device = next(model.parameters()).device

    @torch.no_grad()
    def fn(ids, positions):
        model.eval()
        with precision_context(precision, device):
            return model(ids.to(device), positions.to(device))

    return fn


def unigram_scores(corpus, inputs, targets, train_length: int) -> dict:
    """The add-one unigram model of the training text (lengen.protocols) on the same targets."""
    counts = token_counts(corpus.stream("train"), ByteTokenizer.vocab_size)
    uni = unigram_logits_fn(counts)
    return masked_scores(lambda ids, pos: uni(ids), inputs, targets, torch.zeros_like(inputs), train_length, 256)


def validate(model: MaskedLM, corpus, cfg: MLMConfig) -> dict:
    """eval.json's numbers: the training length, the training sampler's default test mode, no
    log-n, cfg.val_windows windows; and the unigram model on the same masked tokens."""
    windows = eval_windows(corpus.stream("val"), cfg.train_length, cfg.val_windows)
    inputs, targets = eval_masks(windows, cfg.mask_rate)
    mode = default_test_mode(cfg.positions)
    positions = eval_positions(evaluation_sampler(mode, cfg.model.max_position), len(windows), cfg.train_length)
    was = model.cfg.logit_scale
    model.cfg.logit_scale = test_scale(was, False)
    try:
        m = masked_scores(model_logits_fn(model, cfg.precision), inputs, targets, positions, cfg.train_length)
    finally:
        model.cfg.logit_scale = was
    u = unigram_scores(corpus, inputs, targets, cfg.train_length)
    return {"val_accuracy": m["accuracy"], "val_bpb": m["bpb"], "unigram_accuracy": u["accuracy"],
            "unigram_bpb": u["bpb"], "val_masked_tokens": m["masked_tokens"], "val_test_positions": mode,
            "train_length": cfg.train_length}


@dataclass
class MLMEvalConfig:
    lengths: list[int] = field(default_factory=list)         # empty: 1, 2, 4, 8 x the training length
    test_positions: list[str] = field(default_factory=list)  # empty: random+uniform for randomized, else standard
    log_n: str = "both"         # off | on | both: log-n scaled attention at test time
    windows: int = 64           # validation windows per length (Su's protocol: 1,000)
    batch_size: int = 16        # windows per forward pass
    seed: int = EVAL_SEED       # windows, masks and test positions
    unigram: bool = True        # add the unigram baseline's rows
    device: str = "auto"
    precision: str = "fp32"

    def validate(self, cfg: MLMConfig | None = None) -> None:
        """Option checks; with the run's config also the lengths and position-mode defaults."""
        if self.log_n not in LOG_N:
            raise LengenError(f"--log-n must be one of {', '.join(LOG_N)}, got {self.log_n!r}")
        for mode in self.test_positions:
            if mode not in TEST_MODES:
                raise LengenError(unknown_name("test position mode", mode, TEST_MODES))
        for name in ("windows", "batch_size"):
            if getattr(self, name) < 1:
                raise LengenError(f"{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.seed < 0:
            raise LengenError(f"seed must be >= 0, got {self.seed}")
        if self.lengths and min(self.lengths) < 1:
            raise LengenError(f"lengths must be >= 1, got {self.lengths}")
        check_precision(self.precision)
        if cfg is not None:
            if not self.lengths:
                self.lengths = [cfg.train_length * f for f in (1, 2, 4, 8)]
            self.lengths = sorted(set(self.lengths))
            if not self.test_positions:
                self.test_positions = ["random", "uniform"] if cfg.positions == "randomized" else ["standard"]
            if cfg.model.logit_scale != "none":  # trained with its own scaling (ssmax, ...): log-n would replace it
                if self.log_n == "on":
                    raise LengenError(f"--log-n on: this run trained with logit_scale {cfg.model.logit_scale!r}, "
                                      "which its evaluation keeps; log-n would replace it (use --log-n off)")
                self.log_n = "off"
            self.test_positions = list(dict.fromkeys(self.test_positions))


def test_scale(trained: str, log_n: bool) -> str:
    """The logit scaling of an evaluation: log_n when switched on (only for a run trained without
    scaling, MLMEvalConfig.validate), else the one it trained with (none, ssmax, ...)."""
    return "log_n" if log_n else trained


def load_run(run_dir: str | Path, device="cpu") -> tuple[MLMConfig, MaskedLM]:
    device = resolve_device(device)
    run = RunDir(run_dir)
    if not run.file("config.json").exists():
        raise LengenError(f"{run.path} is not a run directory (no config.json); train it with `lengen mlm train`")
    cfg = MLMConfig.from_dict(run.read_config(), where=str(run.path))
    ckpt = run.load_checkpoint()
    if ckpt is None:
        raise LengenError(f"{run.path} has no checkpoint yet; train it first")
    model = MaskedLM(cfg.model)
    model.load_state_dict(ckpt["model"])
    return cfg, model.to(device).eval()


def evaluate_mlm(run_dir: str | Path, ecfg: MLMEvalConfig, out_dir: str | Path | None = None,
                 progress: bool = True) -> dict:
    """Score every (test-position mode, log-n) variant at every length; write results.csv,
    results.json and results.png into out_dir (default RUN_DIR/eval-mlm)."""
    ecfg.validate()
    device = resolve_device(ecfg.device)
    out_dir = Path(out_dir) if out_dir else Path(run_dir) / "eval-mlm"
    if RunDir(run_dir).exists:  # (else load_run says it is no run directory) an unwritable out: before the work
        check_writable(out_dir)
    cfg, model = load_run(run_dir, device)
    ecfg.validate(cfg)
    longest = max(ecfg.lengths)
    samplers = {}
    for mode in ecfg.test_positions:  # a table too short, an impossible length: refused before scoring
        samplers[mode] = evaluation_sampler(mode, cfg.model.max_position)
        check_positions_fit(model.pe, samplers[mode], longest, f"evaluation with {mode!r} positions")
    corpus = load_corpus(cfg.corpus, cfg.val_fraction)
    val = corpus.stream("val")
    data = {L: eval_windows(val, L, ecfg.windows, ecfg.seed) for L in ecfg.lengths}
    switches = {"off": [False], "on": [True], "both": [False, True]}[ecfg.log_n]
    variants = [(mode, ln) for mode in ecfg.test_positions for ln in switches]
    bar = progress_bar(len(variants) * len(ecfg.lengths), "mlm eval", disable=not progress)
    rows: list[dict] = []
    fn = model_logits_fn(model, ecfg.precision)
    trained_scale = model.cfg.logit_scale
    try:
        for L, windows in data.items():
            inputs, targets = eval_masks(windows, cfg.mask_rate, ecfg.seed)
            if ecfg.unigram:
                rows.append({"method": "unigram", "test_positions": "", "log_n": False, "length": L,
                             **unigram_scores(corpus, inputs, targets, cfg.train_length), "windows": len(windows)})
            for mode, ln in variants:
                positions = eval_positions(samplers[mode], len(windows), L, ecfg.seed)
                model.cfg.logit_scale = test_scale(trained_scale, ln)
                s = masked_scores(fn, inputs, targets, positions, cfg.train_length, ecfg.batch_size)
                rows.append({"method": mode + ("+logn" if ln else ""), "test_positions": mode, "log_n": ln,
                             "length": L, **s, "windows": len(windows)})
                bar.update(1)
    finally:
        model.cfg.logit_scale = trained_scale
        bar.close()
    order = {m: i for i, m in enumerate(dict.fromkeys(r["method"] for r in rows if r["method"] != "unigram"))}
    rows.sort(key=lambda r: (order.get(r["method"], len(order)), r["length"]))
    meta = {"run": str(run_dir), "pe": cfg.model.pe, "positions": cfg.positions,
            "position_options": cfg.position_options, "train_length": cfg.train_length,
            "mask_rate": cfg.mask_rate, "key_norm": cfg.model.key_norm, **asdict(ecfg), "device": str(device),
            "table_bpb": pivot_table(rows, "bpb")}
    table = write_results(out_dir, rows, meta, "accuracy", cfg.train_length,
                          title=f"masked LM {cfg.model.pe}/{cfg.positions}: masked-token accuracy")
    return {"rows": rows, "table": table, "table_bpb": meta["table_bpb"], "out_dir": str(out_dir)}
