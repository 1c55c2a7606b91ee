"""Evaluate a trained LM run against context length with one protocol and several methods;
write results.csv / results.json / a plot into an output directory."""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from lengen.data import load_corpus, long_sequences
from lengen.data.tokenizer import ByteTokenizer
from lengen.devices import check_precision, precision_context, resolve_device
from lengen.environment import run_environment
from lengen.errors import LengenError
from lengen.extrapolation import parse_spec
from lengen.io import check_writable
from lengen.lm.config import LMConfig
from lengen.lm.methods import calibrate_methods, default_methods, resolve_methods, sweep_methods
from lengen.lm.model import DecoderLM
from lengen.progress import progress_bar
from lengen.protocols import (
    last_segment_perplexity,
    passkey_accuracy,
    perplexity_vs_length,
    ruler_accuracy,
    write_results,
    write_ruler_results,
)
from lengen.protocols.fitting import check_prompts_fit
from lengen.protocols.ruler import check_tasks
from lengen.training.run_dir import RunDir

PROTOCOLS = ("ppl", "last-segment", "passkey", "ruler")
#: DroPE's logit scale (--drope-scale): the coefficients the fit searches, and its method label
SCALE_RANGE = (0.0, 1.0)
SCALE_GRID = 11          # grid points over SCALE_RANGE (step 0.1), then a golden-section refinement
SCALE_GOLDEN_STEPS = 8   # around the best grid point: an interval of 0.2 x 0.618^8 = 0.0043


def plot_title(pe: str, train_length: int, protocol: str, segment: int | None = None) -> str:
    """The title of an evaluation's plot (docs/ redraws it from the committed results)."""
    return f"{pe} LM (train length {train_length}), {protocol}" + (f" (last {segment} tokens)" if segment else "")


@dataclass
class LMEvalConfig:
    methods: list[str] = field(default_factory=list)   # empty: lengen.lm.methods.default_methods
    lengths: list[int] = field(default_factory=list)   # empty: 1x, 2x, 4x, 8x the training length
    protocol: str = "ppl"
    segment: int | None = None      # last-segment: scored tokens K (default: the shortest length)
    docs: int = 16                  # ppl / last-segment: validation sequences
    trials: int = 20                # passkey: prompts per length; ruler: per task and length
    seed: int = 0                   # passkey, ruler: prompt randomness (the ppl sequences are deterministic)
    tasks: list[str] = field(default_factory=list)   # ruler: empty = every task (lengen.protocols.ruler.TASKS)
    max_new_tokens: int = 10        # passkey: greedy continuation length (ruler sizes it per task)
    batch_size: int = 1             # ppl / last-segment: sequences per forward pass (passkey: one prompt at a time)
    device: str = "auto"            # auto | cpu | cuda | cuda:N (lengen.devices)
    precision: str = "fp32"         # fp32 | tf32 | bf16: the forward passes' numeric mode
    #: NoPE models: also evaluate with DroPE's logit scale beta = 1 + c ln(T / L) past the training
    #: length L: "fit" (c fitted on `fit_docs` held-out sequences) or a number (that c); None: not
    drope_scale: str | None = None
    fit_docs: int = 8               # --drope-scale fit: held-out sequences after the `docs` reported ones

    def validate(self, train_length: int) -> None:
        if self.protocol not in PROTOCOLS:
            raise LengenError(f"unknown protocol {self.protocol!r}; valid: {', '.join(PROTOCOLS)}")
        if self.drope_scale is not None:
            self.drope_scale = check_drope_scale(self.drope_scale)
            if self.protocol not in ("ppl", "last-segment"):
                raise LengenError(f"--drope-scale is for the perplexity protocols (ppl, last-segment), not "
                                  f"{self.protocol}")
        if self.fit_docs < 1:
            raise LengenError(f"fit-docs must be >= 1, got {self.fit_docs}")
        if not self.lengths:
            self.lengths = [train_length * f for f in (1, 2, 4, 8)]
        if min(self.lengths) < 1:
            raise LengenError(f"lengths must be >= 1, got {self.lengths}")
        self.lengths = sorted(set(self.lengths))
        for name in ("docs", "trials", "batch_size", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise LengenError(f"{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.protocol == "ruler":
            self.tasks = check_tasks(self.tasks)
        if self.protocol == "last-segment":
            self.segment = self.segment or min(train_length, min(self.lengths))
            if not 1 <= self.segment <= min(self.lengths):
                raise LengenError(f"--segment {self.segment} must be in 1..{min(self.lengths)} "
                                  f"(the shortest length: every length scores the same last K tokens)")


def check_drope_scale(value) -> str:
    """--drope-scale as the config keeps it: "fit", or a coefficient c >= 0 as text ("0.1")."""
    text = str(value).strip().lower()
    if text == "fit":
        return text
    try:
        c = float(text)
    except ValueError:
        c = math.nan
    if not (math.isfinite(c) and c >= 0):
        raise LengenError(f"--drope-scale must be fit or a number c >= 0, got {value!r}")
    return f"{c:g}"


def drope_scale_label(value: str) -> str:
    """The method label of the scaled rows: `drope_scale:c=fit`, `drope_scale:c=0.1`."""
    return f"drope_scale:c={value}"


def is_nope(cfg) -> bool:
    """A model with no positional encoding in any layer and no logit scaling of its own: what
    DroPE's scale applies to."""
    return cfg.pe == "none" and not cfg.layer_pe and cfg.logit_scale == "none"


@contextmanager
def drope_scaled(model: DecoderLM, c: float):
    """The model with DroPE's logit scale beta = 1 + c ln(T / L) past its training length
    (lengen.models.logit_scaling, mode drope), its own setting back afterwards."""
    cfg = model.cfg
    was = cfg.logit_scale, cfg.logit_scale_options
    cfg.logit_scale, cfg.logit_scale_options = "drope", {"c": float(c)}
    try:
        yield model
    finally:
        cfg.logit_scale, cfg.logit_scale_options = was


def minimise_1d(f, lo: float, hi: float, grid: int = SCALE_GRID, golden_steps: int = SCALE_GOLDEN_STEPS) -> float:
    """The x in [lo, hi] with the least f(x) among those tried: `grid` evenly spaced points (ends
    included: robust to a curve with two dips), then a golden-section search between the
    neighbours of the best one (its interval shrinks by 0.618 a step). f is called once per x
    tried; a caller that caches f sees every value."""
    step = (hi - lo) / (grid - 1)
    seen = {}

    def value(x: float) -> float:
        if x not in seen:
            seen[x] = f(x)
        return seen[x]

    best = min((lo + i * step for i in range(grid)), key=value)
    a, b = max(lo, best - step), min(hi, best + step)
    g = (math.sqrt(5) - 1) / 2
    x1, x2 = b - g * (b - a), a + g * (b - a)
    for _ in range(golden_steps):
        if value(x1) <= value(x2):   # the minimum lies in [a, x2]
            b, x2 = x2, x1
            x1 = b - g * (b - a)
        else:                        # the minimum lies in [x1, b]
            a, x1 = x1, x2
            x2 = a + g * (b - a)
    return min(seen, key=lambda x: (seen[x], x))


def fit_drope_scale(model: DecoderLM, seqs, lengths: list[int], train_length: int, batch_size: int = 1) -> dict:
    """DroPE's c for one model (the paper fits one per model): the c in SCALE_RANGE that minimises
    the mean over the lengths past `train_length` of the per-token NLL of `seqs` (held-out
    sequences, not the reported ones), by minimise_1d: a grid (step 0.1), then a golden-section
    search around its best point; the best c evaluated wins, c = 0 included.
    Returns {"c", "nll", "nll_at_0", "lengths", "sequences", "searched": [[c, nll], ...]}."""
    targets = [T for T in lengths if T > train_length]
    if not targets:  # beta = 1 at every length: nothing to fit
        return {"c": 0.0, "nll": None, "nll_at_0": None, "lengths": [], "sequences": len(seqs), "searched": []}
    seen: dict[float, float] = {}

    def nll(c: float) -> float:
        c = round(c, 6)
        if c not in seen:
            with drope_scaled(model, c):
                fn = model.nll_fn()
                seen[c] = sum(perplexity_vs_length(fn, seqs, [T], batch_size)[0].nll for T in targets) / len(targets)
        return seen[c]

    minimise_1d(nll, *SCALE_RANGE)
    c = min(seen, key=lambda k: (seen[k], k))
    return {"c": c, "nll": seen[c], "nll_at_0": seen[0.0], "lengths": targets, "sequences": len(seqs),
            "searched": [[k, seen[k]] for k in sorted(seen)]}


def load_run(run_dir: str | Path, device: str | torch.device = "cpu") -> tuple[LMConfig, DecoderLM]:
    """The run's config and its trained model in eval mode on `device` (a spec or a torch.device;
    the device the run was trained on does not matter)."""
    device = resolve_device(device)
    run = RunDir(run_dir)
    cfg = LMConfig.from_dict(run.read_config(), where=str(run.path))
    ckpt = run.load_checkpoint()  # map_location cpu
    if ckpt is None:
        raise LengenError(f"{run.path} has no checkpoint yet; train it first")
    model = DecoderLM(cfg.model, ByteTokenizer.vocab_size)
    model.load_state_dict(ckpt["model"])
    return cfg, model.to(device).eval()


def _point_rows(label: str, fn, lengths: list[int]) -> list[dict]:
    """Run `fn(length)` per length; a length the model cannot take (e.g. past a learned
    position table, or shorter than a passkey prompt) becomes a row with NaN and a note."""
    rows = []
    for L in lengths:
        try:
            rows.append({"method": label, **fn(L).row(), "note": ""})
        except LengenError as e:
            rows.append({"method": label, "length": L, "ppl": math.nan, "accuracy": math.nan, "note": str(e)})
    return rows


def _passkey_rows(model, methods, ecfg: LMEvalConfig, meta: dict, bar) -> list[dict]:
    tok = ByteTokenizer()
    meta["trial_records"] = []  # every prompt's key, generated text and parsed answer
    rows: list[dict] = []
    for m in methods:
        def point(L, m=m):
            records: list[dict] = []
            pt = passkey_accuracy(model.generate_fn(m.method), tok.encode, tok.decode, [L], ecfg.trials,
                                  ecfg.seed, ecfg.max_new_tokens, records=records)[0]
            meta["trial_records"] += [{"method": m.label, **r} for r in records]
            return pt
        rows += _point_rows(m.label, point, ecfg.lengths)
        bar.update(len(ecfg.lengths))
    for r in rows:
        r.pop("ppl", None)
    return rows


def _ruler_rows(model, methods, ecfg: LMEvalConfig, meta: dict, bar) -> list[dict]:
    """One row per method, task and length; a (task, length) whose prompt does not fit, or that
    the model cannot take, is a NaN row with a note."""
    tok = ByteTokenizer()
    meta["trial_records"] = []  # every prompt's answers, generated text and score
    rows: list[dict] = []
    for m in methods:
        gen = model.generate_fn(m.method)
        for task in ecfg.tasks:
            for L in ecfg.lengths:
                records: list[dict] = []
                try:
                    (pt,) = ruler_accuracy(gen, tok.encode, tok.decode, [L], [task], ecfg.trials, ecfg.seed,
                                           records=records)
                    rows.append({"method": m.label, **pt.row(), "note": ""})
                except LengenError as e:
                    rows.append({"method": m.label, "task": task, "length": L, "accuracy": math.nan,
                                 "correct": None, "trials": ecfg.trials, "mean_prompt_tokens": None,
                                 "note": str(e)})
                meta["trial_records"] += [{"method": m.label, **r} for r in records]
        bar.update(len(ecfg.lengths))
    return rows


def _ppl_rows(model, methods, ecfg: LMEvalConfig, cfg: LMConfig, meta: dict, bar) -> list[dict]:
    corpus = load_corpus(cfg.corpus, cfg.val_fraction)
    fitting = ecfg.drope_scale == "fit"
    # the fit's sequences follow the reported ones (the list's first `docs` are the same either way)
    seqs = long_sequences(corpus.val_docs, max(ecfg.lengths) + 1, ecfg.docs + (ecfg.fit_docs if fitting else 0),
                          corpus.eos)
    seqs, fit_seqs = seqs[:ecfg.docs], seqs[ecfg.docs:]
    if not seqs:
        raise LengenError(f"the validation documents hold fewer than {max(ecfg.lengths) + 1} tokens in all")
    if fitting and not fit_seqs:
        raise LengenError(f"--drope-scale fit: the validation documents hold no sequence of {max(ecfg.lengths) + 1} "
                          f"tokens beyond the {len(seqs)} reported; lower --docs or the longest length")
    meta["docs_used"] = len(seqs)
    if ecfg.drope_scale is not None:
        if fitting:
            fit = fit_drope_scale(model, fit_seqs, ecfg.lengths, cfg.train_length, ecfg.batch_size)
        else:
            fit = {"c": float(ecfg.drope_scale), "given": True}
        meta["drope_scale"] = fit
    # (label, nll_fn, c): every method, then the scaled model (c = None: no scale)
    scorers = [(m.label, model.nll_fn(m.method), None) for m in methods]
    if ecfg.drope_scale is not None:
        scorers.append((drope_scale_label(ecfg.drope_scale), model.nll_fn(), fit["c"]))
    rows: list[dict] = []
    for label, fn, c in scorers:
        if ecfg.protocol == "ppl":
            def point(L, fn=fn):
                return perplexity_vs_length(fn, seqs, [L], ecfg.batch_size)[0]
        else:
            def point(L, fn=fn):
                return last_segment_perplexity(fn, seqs, [L], ecfg.segment, ecfg.batch_size)[0]
        if c is None:
            rows += _point_rows(label, point, ecfg.lengths)
        else:
            with drope_scaled(model, c):
                rows += [{**r, "c": c} for r in _point_rows(label, point, ecfg.lengths)]
        bar.update(len(ecfg.lengths))
    for r in rows:
        r.pop("accuracy", None)
        if ecfg.protocol == "last-segment":
            r["segment"] = ecfg.segment
    return rows


def evaluate_lm(run_dir: str | Path, ecfg: LMEvalConfig, out_dir: str | Path | None = None,
                progress: bool = True, plain_for_non_rope: bool = False) -> dict:
    """Evaluate every method at every length; write results.csv, results.json and the plot into
    out_dir (default RUN_DIR/eval-PROTOCOL). Returns rows, the markdown table and the paths.
    The model runs on ecfg.device in ecfg.precision; token ids are moved to it per forward pass.
    `plain_for_non_rope` (sweeps over encodings): a non-RoPE model is evaluated with "base" only,
    instead of refusing the RoPE methods."""
    device = resolve_device(ecfg.device)  # a missing GPU fails before the model is loaded
    check_precision(ecfg.precision)
    for spec in ecfg.methods:  # their syntax (and finite numbers) before the model is loaded
        parse_spec(spec)
    out_dir = Path(out_dir) if out_dir else Path(run_dir) / f"eval-{ecfg.protocol}"
    if RunDir(run_dir).exists:  # (else load_run says it is no run directory) an unwritable out: before the work
        check_writable(out_dir)
    cfg, model = load_run(run_dir, device)
    ecfg.validate(cfg.train_length)
    check_prompts_fit(ecfg.protocol, ByteTokenizer().encode, ecfg.lengths, ecfg.tasks or (), ecfg.seed)
    if not ecfg.methods:
        ecfg.methods = default_methods(model.is_rope, cfg.train_length, max(ecfg.lengths))
    if plain_for_non_rope:
        ecfg.methods = sweep_methods(ecfg.methods, model.is_rope)
    methods = resolve_methods(ecfg.methods, model)  # bad method / non-RoPE model -> error before any work
    if ecfg.drope_scale is not None and not is_nope(cfg.model):
        if not plain_for_non_rope:
            raise LengenError(f"--drope-scale is for models without positional encoding (--pe none, no logit "
                              f"scaling of their own); this run uses pe={cfg.model.pe!r}"
                              + (f", logit_scale={cfg.model.logit_scale!r}" if cfg.model.logit_scale != "none" else ""))
        ecfg.drope_scale = None  # a sweep over encodings: the scale applies to its NoPE runs only
    calibrate_methods(methods, model, cfg.corpus, cfg.val_fraction)  # DPE's key pairs, DoPE's heads
    meta = {"run": str(run_dir), "pe": cfg.model.pe, "train_length": cfg.train_length, **asdict(ecfg)}
    scored = len(methods) + (ecfg.drope_scale is not None)
    bar = progress_bar(scored * len(ecfg.lengths), f"lm eval {ecfg.protocol}", disable=not progress)
    meta["device"] = str(device)  # where it ran (ecfg.device may say "auto")
    meta["environment"] = run_environment(device)  # commit, versions, threads: what the numbers came from
    with precision_context(ecfg.precision, device):
        if ecfg.protocol == "ruler":
            rows = _ruler_rows(model, methods, ecfg, meta, bar)
        elif ecfg.protocol == "passkey":
            rows, metric = _passkey_rows(model, methods, ecfg, meta, bar), "accuracy"
        else:
            rows, metric = _ppl_rows(model, methods, ecfg, cfg, meta, bar), "ppl"
    bar.close()
    if ecfg.protocol == "ruler":
        table = write_ruler_results(out_dir, rows, meta, cfg.train_length,
                                    f"{cfg.model.pe} LM (train length {cfg.train_length}), ruler")
        return {"rows": rows, "table": table, "out_dir": str(out_dir), "metric": "accuracy", "meta": meta}
    table = write_results(out_dir, rows, meta, metric, cfg.train_length,
                          plot_title(cfg.model.pe, cfg.train_length, ecfg.protocol, ecfg.segment),
                          plot_name=f"{ecfg.protocol.replace('-', '_')}_vs_length.png")
    return {"rows": rows, "table": table, "out_dir": str(out_dir), "metric": metric, "meta": meta}
