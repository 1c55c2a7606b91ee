"""`command: train` (the default): CHE runs, each a `lengen train` run directory."""

from __future__ import annotations

import copy

from lengen.sweeps.kinds.base import SweepKind


class CHEKind(SweepKind):
    name = "train"
    command = "lengen train"
    tables = ("results.csv", "accuracy_by_length.csv")
    cheap_fields = ("seed", "lr", "grad_clip", "steps", "eval_samples", "eval_seed", "checkpoint_every",
                    "log_every", "precision", "device")

    def options(self) -> list[str]:
        from lengen.training.config import TRAIN_OPTIONS

        return sorted((set(TRAIN_OPTIONS) - {"device"}) | {"preset"})

    def coerce(self, name: str, value):
        from lengen.errors import LengenError
        from lengen.training.options import coerce_option

        if name == "preset":
            if not isinstance(value, str):
                raise LengenError(f"preset must be a preset name, got {value!r}")
            return value
        return coerce_option(name, value)

    def config(self, options: dict, grid_keys: frozenset = frozenset()):
        from lengen.training.config import options_not_read
        from lengen.training.options import config_from_options

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
        from lengen.training.config import TrainConfig

        return TrainConfig.from_dict(d)

    def check(self, cfg, evaluation) -> None:
        from lengen.training.setup import build_run

        build_run(copy.deepcopy(cfg))

    def done_file(self, evaluation) -> str:
        return "eval.json"

    def execute(self, path, cfg, evaluation, done_file, on_log) -> str:
        from lengen.training.loop import train

        record = train(cfg, path, progress=False, on_log=on_log)
        return f"score {record.get('score')}"

    def results_writer(self, sweep, runs, evaluation):
        from lengen.sweeps.results import ResultsWriter

        return ResultsWriter(sweep, runs)


CHE = CHEKind()
