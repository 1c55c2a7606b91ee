"""`command: lm`: language-model runs. The grid holds `lengen lm train` options; the file's `eval:`
section holds `lengen lm eval` options applied to every run once it is trained:

    command: lm
    grid: {pe: [rope, alibi, fire], seed: [0, 1, 2]}
    fixed: {train_length: 128, steps: 1000}
    eval: {protocol: ppl, lengths: [128, 256, 512, 1024], methods: [rope, "yarn:factor=8"]}

RoPE-only methods (everything but the plain `rope`/`base`) apply to RoPE runs; every other run is
evaluated plainly (`base`), and `drope_scale` (DroPE's logit scale) applies to the NoPE runs only.
A variant's `init_from:` (lengen.sweeps.spec) starts its runs from another variant's finished RoPE
run of the same grid point: DroPE's recalibration (`lengen lm train --init-from`). The evaluation is not part of a run's id: changing the `eval:` section
re-evaluates the trained runs (the done file's name hashes the section) without retraining them.
"""

from __future__ import annotations

import copy
import time
import typing

import torch

from lengen import io
from lengen.data import load_corpus
from lengen.data.tokenizer import ByteTokenizer
from lengen.devices import check_precision
from lengen.errors import LengenError
from lengen.extrapolation import split_methods
from lengen.lm import evaluate  # its functions by attribute, so a test can stand in for evaluate_lm
from lengen.lm.config import LMConfig
from lengen.training.corpus_loop import EVAL_FILE
from lengen.lm.methods import default_methods, resolve_methods, sweep_methods
from lengen.lm.model import DecoderLM
from lengen.lm.options import LM_OPTIONS, coerce_lm_option, lm_config_from_options, lm_option_values
from lengen.lm.train import build_train_sampler, check_source, init_record, train_lm
from lengen.options import coerce_value
from lengen.protocols.fitting import check_prompts_fit
from lengen.protocols.options import USED_BY, check_protocol_options
from lengen.sweeps.kinds.base import SweepKind, hashed_done_file, record_problem, trained_and_evaluated
from lengen.training.run_dir import config_digest

#: `lengen lm eval` settings an `eval:` section may give (device is where the sweep runs)
EVAL_KEYS = ("methods", "lengths", "protocol", "segment", "docs", "trials", "seed", "tasks", "max_new_tokens",
             "batch_size", "precision", "drope_scale", "fit_docs")


def _eval_types() -> dict:
    hints = typing.get_type_hints(evaluate.LMEvalConfig)
    return {k: hints[k] for k in EVAL_KEYS}


class LMKind(SweepKind):
    name = "lm"
    command = "lengen lm train"
    cheap_fields = ("seed", "lr", "steps", "warmup", "weight_decay", "grad_clip", "checkpoint_every",
                    "log_every", "val_windows", "precision", "device", "init_from")
    starts_from_runs = True
    tables = ("results.csv", "ppl_by_length.csv")
    leading_columns = ("run_id", "pe", "seed", "lr", "steps", "train_length")
    trailing_columns = ("train_loss", "val_ppl", "unigram_ppl", "parameters", "seconds", "train_seconds",
                        "eval_seconds", "device")
    config_columns = ("pe", "seed", "lr", "steps", "train_length")

    def trailing_for(self, evaluation) -> tuple[str, ...]:
        # with DroPE's logit scale: the run's fitted (or given) c, empty for a run it does not apply to
        return self.trailing_columns + (("drope_c",) if (evaluation or {}).get("drope_scale") else ())

    def options(self) -> list[str]:
        return sorted(set(LM_OPTIONS) - {"device"})

    def option_values(self, cfg) -> dict:
        # init_from as the source's encoding and step ("rope@600"): the same for every seed, so the
        # recalibrated runs of one variant share a row of the report
        source = cfg.init_from
        return {**lm_option_values(cfg), "init_from": None if source is None else f"{source['pe']}@{source['step']}"}

    def coerce(self, name: str, value):
        return coerce_lm_option(name, value)

    def config(self, options: dict, grid_keys: frozenset = frozenset()):
        cfg = lm_config_from_options(options)
        cfg.validate()
        return cfg

    def config_from_dict(self, d: dict):
        return LMConfig.from_dict(d)

    def parse_eval(self, raw, errors: list[str]) -> dict | None:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            errors.append("eval: must map `lengen lm eval` options to values, e.g. {protocol: ppl, "
                          "lengths: [256, 512]}")
            return {}
        types, settings, before = _eval_types(), {}, len(errors)
        for key, value in raw.items():
            name = str(key).replace("-", "_")
            if name == "device":
                errors.append("eval.device: where a sweep runs is a `lengen sweep run --device` flag")
                continue
            if name not in types:
                errors.append(f"eval.{key}: unknown `lengen lm eval` option; valid: {', '.join(EVAL_KEYS)}")
                continue
            if name == "methods" and isinstance(value, str):
                value = split_methods(value)
            if name == "drope_scale" and isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)
            try:
                settings[name] = coerce_value(name, value, types[name])
            except LengenError as e:
                errors.append(f"eval.{key}: {e}")
        if len(errors) > before:
            return settings
        try:
            protocol = settings.get("protocol", "ppl")
            check_protocol_options(protocol, **{k: settings.get(k) for k in USED_BY if k != "corpus"})
            if "precision" in settings:
                check_precision(settings["precision"])
            if "lengths" in settings and (not settings["lengths"] or min(settings["lengths"]) < 1):
                raise LengenError(f"lengths must be >= 1, got {settings['lengths']}")
            if "max_new_tokens" in settings and settings["max_new_tokens"] < 1:
                raise LengenError(f"max_new_tokens must be >= 1, got {settings['max_new_tokens']}")
            # the rest of lengen lm eval's checks, once for the file rather than once per run
            # (what depends on a run's training length is only a default)
            ecfg = self.eval_config(settings, min(settings.get("lengths") or [1]))
            if settings.get("lengths"):   # else the lengths depend on each run's training length
                check_prompts_fit(ecfg.protocol, ByteTokenizer().encode, ecfg.lengths, ecfg.tasks, ecfg.seed)
        except LengenError as e:
            errors.append(f"eval: {str(e).replace('--', '')}")   # the file's names, not flags
        return settings

    def eval_config(self, evaluation: dict | None, train_length: int, device: str = "cpu"):
        ecfg = evaluate.LMEvalConfig(**copy.deepcopy(evaluation or {}), device=device)
        ecfg.validate(train_length)
        return ecfg

    def start_from(self, cfg, source_cfg) -> None:
        cfg.init_from = init_record(source_cfg, source_cfg.steps)
        cfg.validate()
        check_source(cfg, source_cfg, "init_from")

    def check(self, cfg, evaluation) -> None:
        ecfg = self.eval_config(evaluation, cfg.train_length)
        try:
            # shapes and options only: no memory, and no number drawn from anyone's stream
            with torch.random.fork_rng(), torch.device("meta"):
                model = DecoderLM(copy.deepcopy(cfg.model), ByteTokenizer.vocab_size)
        except LengenError:
            raise
        except (TypeError, ValueError) as e:  # an encoding option of the wrong type or value
            raise LengenError(f"encoding {cfg.model.pe!r} with options {cfg.model.pe_options}: "
                              f"{' '.join(str(e).split())}") from None
        build_train_sampler(cfg, model.decoder.pe)  # pose's target, a table too short: refused now
        methods = ecfg.methods or default_methods(model.is_rope, cfg.train_length, max(ecfg.lengths))
        resolve_methods(sweep_methods(methods, model.is_rope), model)
        load_corpus(cfg.corpus, cfg.val_fraction)  # a missing corpus fails now (then it is cached)

    def done_file(self, evaluation) -> str:
        return hashed_done_file(evaluation)

    def records(self, cfg, done_file, evaluation) -> dict[str, dict]:
        return trained_and_evaluated(cfg, EVAL_FILE, done_file, evaluation)

    def execute(self, path, cfg, evaluation, done_file, on_log) -> str:
        training = self.records(cfg, done_file, evaluation)[EVAL_FILE]
        if record_problem(path / EVAL_FILE, training) is not None:  # else trained: only the evaluation is left
            # no record, or a damaged or foreign one: resumed from the checkpoint, validated again
            # a recalibration starts from its source: the run of that id in this sweep folder
            source = None if cfg.init_from is None else path.parent / cfg.init_from["run_id"]
            train_lm(cfg, path, progress=False, on_log=on_log, note=None, init_dir=source)  # `sweep run` named it
        record = io.read_json(path / EVAL_FILE)
        ecfg = self.eval_config(evaluation, cfg.train_length, cfg.device)
        ecfg.precision = (evaluation or {}).get("precision", cfg.precision)
        start = time.perf_counter()
        result = evaluate.evaluate_lm(path, ecfg, out_dir=path / done_file.removesuffix(".json"), progress=False,
                                      plain_for_non_rope=True)
        io.write_json(path / done_file, {"settings": evaluation or {}, "config_digest": config_digest(cfg),
                                         "protocol": ecfg.protocol,
                                         "metric": result["metric"], "lengths": ecfg.lengths,
                                         "rows": result["rows"], "device": result["meta"]["device"],
                                         "eval_seconds": round(time.perf_counter() - start, 3)})
        return f"val ppl {record.get('val_ppl'):.3f}, {len(result['rows'])} {result['metric']} rows"

    def by_length_columns(self, evaluation) -> list[str]:
        per_task = ["task"] if protocol_of(evaluation) == "ruler" else []  # ruler: a value per task too
        return ["run_id", "method", *per_task, "length", metric_of(protocol_of(evaluation))]

    def rows_of(self, path, done, evaluation) -> tuple[dict, list[tuple]]:
        record = io.read_json(path / EVAL_FILE)  # the training's: written before the done file
        result = {k: record.get(k) for k in ("train_loss", "val_ppl", "unigram_ppl", "parameters", "train_seconds")}
        result.update({k: done.get(k) for k in ("eval_seconds", "device")})
        result["drope_c"] = next((r["c"] for r in done["rows"] if r.get("c") is not None), None)
        *keys, metric = self.by_length_columns(evaluation)[1:]   # method[, task], length; the metric
        return result, [(*(r[k] for k in keys), r.get(metric)) for r in done["rows"]]


def protocol_of(evaluation: dict | None) -> str:
    """The evaluation protocol of a sweep's `eval:` section."""
    return (evaluation or {}).get("protocol", "ppl")


def metric_of(protocol: str) -> str:
    """What a protocol measures at each length: accuracy (passkey, ruler) or perplexity."""
    return "accuracy" if protocol in ("passkey", "ruler") else "ppl"


LM = LMKind()
