"""`command: mlm`: masked-LM runs (Su's MLM experiment, docs/mlm.md). The grid holds `lengen mlm train`
options; the file's `eval:` section holds `lengen mlm eval` options applied to every run once it is
trained:

    command: mlm
    grid: {seed: [0, 1, 2], positions: [standard, randomized]}
    fixed: {steps: 1500, warmup: 150}
    eval: {lengths: [64, 128, 256, 512], windows: 64, log_n: both}

Test positions left out are `lengen mlm eval`'s default for each run (random and uniform for a
randomized run, standard otherwise). As for `command: lm`, the evaluation is not part of a run's id:
the done file's name hashes the `eval:` section, so an edited section re-evaluates the trained runs
without retraining them.
"""

from __future__ import annotations

import copy
import time
import typing

import torch

from lengen import io
from lengen.data import load_corpus
from lengen.devices import resolve_device
from lengen.errors import LengenError
from lengen.training.corpus_loop import EVAL_FILE
from lengen.mlm import evaluate  # its functions by attribute, so a test can stand in for evaluate_mlm
from lengen.mlm.config import MLMConfig
from lengen.mlm.options import MLM_OPTIONS, coerce_mlm_option, mlm_config_from_options, mlm_option_values
from lengen.mlm.train import build_run, train_mlm
from lengen.options import coerce_value
from lengen.positions import check_positions_fit, evaluation_sampler
from lengen.sweeps.kinds.base import SweepKind, hashed_done_file, record_problem, trained_and_evaluated
from lengen.training.run_dir import config_digest

#: `lengen mlm eval` settings an `eval:` section may give (the device is where the sweep runs; the
#: unigram baseline is always scored)
EVAL_KEYS = ("lengths", "test_positions", "log_n", "windows", "batch_size", "seed", "precision")
#: a row of `lengen mlm eval`'s results.csv: what groups a run's values, the length, what it measures
EVAL_COLUMNS = ("method", "test_positions", "log_n", "length", "accuracy", "bpb", "nll", "acc_first",
                "acc_last_half", "masked_tokens", "windows")


def _parse_setting(name: str, value):
    """One `eval:` value as `lengen mlm eval` takes it, checked by MLMEvalConfig; LengenError."""
    if name == "test_positions" and isinstance(value, str):   # "random,uniform" as on the command line
        value = [m.strip() for m in value.split(",") if m.strip()]
    if name == "log_n" and isinstance(value, bool):           # YAML 1.1 reads on/off as booleans
        value = "on" if value else "off"
    value = coerce_value(name, value, typing.get_type_hints(evaluate.MLMEvalConfig)[name])
    if name in ("lengths", "test_positions") and not value:
        raise LengenError(f"{name} must list at least one value (leave it out for the default)")
    evaluate.MLMEvalConfig(**{name: value}).validate()
    return value


class MLMKind(SweepKind):
    name = "mlm"
    command = "lengen mlm train"
    cheap_fields = ("seed", "lr", "steps", "warmup", "weight_decay", "grad_clip", "mask_rate", "batch_size",
                    "checkpoint_every", "log_every", "val_windows", "precision", "device")
    tables = ("results.csv", "mlm_by_length.csv")
    leading_columns = ("run_id", "pe", "positions", "seed", "lr", "steps", "train_length")
    trailing_columns = ("train_loss", "val_accuracy", "val_bpb", "unigram_accuracy", "unigram_bpb", "parameters",
                        "seconds", "train_seconds", "eval_seconds", "device")
    config_columns = ("pe", "positions", "seed", "lr", "steps", "train_length")

    def options(self) -> list[str]:
        return sorted(set(MLM_OPTIONS) - {"device"})

    def option_values(self, cfg) -> dict:
        return mlm_option_values(cfg)

    def coerce(self, name: str, value):
        return coerce_mlm_option(name, value)

    def config(self, options: dict, grid_keys: frozenset = frozenset()):
        cfg = mlm_config_from_options(options)
        cfg.validate()
        return cfg

    def config_from_dict(self, d: dict):
        return MLMConfig.from_dict(d)

    def parse_eval(self, raw, errors: list[str]) -> dict | None:
        """Every problem of the section in one line (`eval.windows: ...; eval.log_n: ...`)."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            errors.append("eval: must map `lengen mlm eval` options to values, e.g. {lengths: [64, 512], "
                          "windows: 64}")
            return {}
        settings, problems = {}, []
        for key, value in raw.items():
            name = str(key).replace("-", "_")
            if name == "device":
                problems.append("eval.device: where a sweep runs is a `lengen sweep run --device` flag")
            elif name not in EVAL_KEYS:
                problems.append(f"eval.{key}: unknown `lengen mlm eval` option (valid: {', '.join(EVAL_KEYS)})")
            else:
                try:
                    settings[name] = _parse_setting(name, value)
                except LengenError as e:
                    problems.append(f"eval.{key}: {str(e).replace('--', '')}")   # the file's names, not flags
        if problems:
            errors.append("; ".join(problems))
        return settings

    def eval_config(self, evaluation: dict | None, cfg: MLMConfig):
        """The run's `lengen mlm eval` settings: the section's, on `cfg`'s device and precision, with
        `lengen mlm eval`'s defaults for the run (lengths, test positions) filled in."""
        evaluation = copy.deepcopy(evaluation or {})
        ecfg = evaluate.MLMEvalConfig(**{"precision": cfg.precision, **evaluation}, device=cfg.device)
        ecfg.validate(cfg)
        return ecfg

    def check(self, cfg, evaluation) -> None:
        ecfg = self.eval_config(evaluation, cfg)
        # shapes and options only: no memory, and no number drawn from anyone's stream
        with torch.random.fork_rng(), torch.device("meta"):
            model, _ = build_run(copy.deepcopy(cfg))
        longest = max(ecfg.lengths)
        for mode in ecfg.test_positions:
            check_positions_fit(model.pe, evaluation_sampler(mode, cfg.model.max_position), longest,
                                f"eval: {mode!r} test positions")
        val = load_corpus(cfg.corpus, cfg.val_fraction).stream("val")  # a missing corpus fails now (then cached)
        if len(val) < longest + 1:
            raise LengenError(f"eval: the validation text has {len(val)} tokens, fewer than one window of "
                              f"{longest + 1}; lower the lengths or use a larger corpus")

    def done_file(self, evaluation) -> str:
        return hashed_done_file(evaluation)

    def records(self, cfg, done_file, evaluation) -> dict[str, dict]:
        return trained_and_evaluated(cfg, EVAL_FILE, done_file, evaluation)

    def execute(self, path, cfg, evaluation, done_file, on_log) -> str:
        training = self.records(cfg, done_file, evaluation)[EVAL_FILE]
        if record_problem(path / EVAL_FILE, training) is not None:  # else trained: only the evaluation is left
            # no record, or a damaged or foreign one: resumed from the checkpoint, validated again
            train_mlm(cfg, path, progress=False, on_log=on_log, note=None)  # `sweep run` named it
        record = io.read_json(path / EVAL_FILE)
        ecfg = self.eval_config(evaluation, cfg)
        start = time.perf_counter()
        result = evaluate.evaluate_mlm(path, ecfg, out_dir=path / done_file.removesuffix(".json"), progress=False)
        io.write_json(path / done_file, {"settings": evaluation or {}, "config_digest": config_digest(cfg),
                                         "lengths": ecfg.lengths,
                                         "test_positions": ecfg.test_positions, "log_n": ecfg.log_n,
                                         "rows": result["rows"], "device": str(resolve_device(ecfg.device)),
                                         "eval_seconds": round(time.perf_counter() - start, 3)})
        return f"val accuracy {record.get('val_accuracy'):.3f}, {len(result['rows'])} rows"

    def by_length_columns(self, evaluation) -> list[str]:
        return ["run_id", *EVAL_COLUMNS]

    def rows_of(self, path, done, evaluation) -> tuple[dict, list[tuple]]:
        record = io.read_json(path / EVAL_FILE)  # the training's: written before the done file
        result = {k: record.get(k) for k in ("train_loss", "val_accuracy", "val_bpb", "unigram_accuracy",
                                              "unigram_bpb", "parameters", "train_seconds")}
        result.update({k: done.get(k) for k in ("eval_seconds", "device")})
        return result, [tuple(r[k] for k in EVAL_COLUMNS) for r in done["rows"]]


MLM = MLMKind()
