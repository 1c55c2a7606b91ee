"""`command: train` (the default): CHE runs, each a `lengen train` run directory."""

from __future__ import annotations

import copy

from lengen.errors import LengenError
from lengen.sweeps.kinds.base import SweepKind
from lengen.che.config import TRAIN_OPTIONS, TrainConfig, options_not_read
from lengen.che import loop
from lengen.che.options import coerce_option, config_from_options, option_values
from lengen.che.setup import build_run, settle


class CHEKind(SweepKind):
    name = "train"
    command = "lengen train"
    cheap_fields = ("seed", "lr", "grad_clip", "steps", "eval_samples", "eval_seed", "checkpoint_every",
                    "log_every", "precision", "device")
    tables = ("results.csv", "accuracy_by_length.csv")
    leading_columns = ("run_id", "task", "pe", "positions", "test_positions", "lr", "seed", "steps",
                       "train_length", "max_length", "score", "accuracy_in_train_range", "seconds",
                       "train_seconds", "eval_seconds", "device")
    config_columns = ("task", "pe", "positions", "lr", "seed", "steps", "train_length", "max_length")

    def options(self) -> list[str]:
        return sorted((set(TRAIN_OPTIONS) - {"device"}) | {"preset"})

    def option_values(self, cfg) -> dict:
        return option_values(cfg)

    def coerce(self, name: str, value):
        if name == "preset":
            if not isinstance(value, str):
                raise LengenError(f"preset must be a preset name, got {value!r}")
            return value
        return coerce_option(name, value)

    def config(self, options: dict, grid_keys: frozenset = frozenset()):
        options = dict(options)
        if "model" in grid_keys:
            # a sweep across architectures: a `fixed` option applies to the models that read it
            # (d_model to the Transformer, hidden_size to the recurrent ones); grid values must apply
            unread = set(options_not_read(options["model"]))
            options = {k: v for k, v in options.items() if k in grid_keys or k not in unread}
        preset = options.pop("preset", None)
        cfg = config_from_options(options, preset=preset)
        cfg.validate()
        return cfg

    def config_from_dict(self, d: dict):
        return TrainConfig.from_dict(d)

    def check(self, cfg, evaluation) -> None:
        build_run(copy.deepcopy(cfg))

    def done_file(self, evaluation) -> str:
        return "eval.json"

    def execute(self, path, cfg, evaluation, done_file, on_log) -> str:
        # a damaged or foreign eval.json is named by `sweep run` (SweepDir.damage), then evaluated again here
        record = loop.train(cfg, path, progress=False, on_log=on_log, note=None)
        return f"score {record.get('score')}"

    def settled(self, cfg):
        return settle(copy.deepcopy(cfg))

    def records(self, cfg, done_file, evaluation) -> dict[str, dict]:
        return {done_file: loop.expected_eval(cfg)}

    def by_length_columns(self, evaluation) -> list[str]:
        return ["run_id", "length", "accuracy"]

    def rows_of(self, path, done, evaluation) -> tuple[dict, list[tuple]]:
        # the done file is the run's eval.json
        result = {k: done[k] for k in ("test_positions", "max_length", "score", "accuracy_in_train_range")}
        result.update({k: done.get(k) for k in ("train_seconds", "eval_seconds", "device")})
        return result, list(done["accuracy_by_length"].items())


CHE = CHEKind()
