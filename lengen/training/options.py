"""`lengen train` options as data: the option names shared by the command line, presets and sweep
files, where each lands in TrainConfig, and the one function that turns options into a config."""

from __future__ import annotations

import functools
import typing
from dataclasses import fields

from lengen.errors import LengenError
from lengen.models.config import ModelConfig, not_applicable
from lengen.options import coerce_value, get_path, set_path
from lengen.training.config import TrainConfig

# option name (the flag without dashes, underscores) -> TrainConfig path ("model." = ModelConfig)
TRAIN_OPTIONS = {
    "task": "task", "pe": "model.pe", "pe_options": "model.pe_options", "positions": "positions",
    "position_options": "position_options", "test_positions": "test_positions", "steps": "steps",
    "batch_size": "batch_size", "train_length": "train_length", "max_length": "max_length",
    "eval_samples": "eval_samples", "lr": "lr", "seed": "seed", "checkpoint_every": "checkpoint_every",
    "log_every": "log_every", "max_position": "model.max_position", "layers": "model.num_layers",
    "heads": "model.num_heads", "d_model": "model.d_model", "d_ff": "model.d_ff",
    "dropout": "model.dropout", "norm": "model.norm", "logit_scale": "model.logit_scale",
    "key_norm": "model.key_norm", "grad_clip": "grad_clip", "device": "device", "precision": "precision",
    "model": "model.architecture", "hidden_size": "model.hidden_size",
    "memory_cell_size": "model.memory_cell_size", "memory_size": "model.memory_size",
}
#: the run's options that set the Transformer's positions (no recurrent model reads them)
_POSITION_OPTIONS = ("positions", "position_options", "test_positions")


def options_not_read(architecture: str) -> list[str]:
    """The options (TRAIN_OPTIONS names) that a model of `architecture` ignores: the Transformer's
    and its positions' for a recurrent model, the recurrent sizes for the Transformer."""
    cfg = ModelConfig(architecture=architecture)
    model_fields = cfg.fields_not_read()
    return [name for name, path in TRAIN_OPTIONS.items()
            if (path.startswith("model.") and path[6:] in model_fields)
            or (cfg.recurrent and name in _POSITION_OPTIONS)]


def inapplicable_options(cfg: TrainConfig) -> list[str]:
    """Options of `cfg` set away from their default that its model does not read (positions
    "standard" and test positions "standard" count as the default: they change nothing)."""
    default = TrainConfig().to_dict()
    d = cfg.to_dict()
    harmless = {"test_positions": (None, "standard")}
    out = []
    for name in options_not_read(cfg.model.architecture):
        value, path = get_path(d, TRAIN_OPTIONS[name]), TRAIN_OPTIONS[name]
        if value != get_path(default, path) and value not in harmless.get(name, ()):
            out.append(name)
    return out


def check_given_options(given, architecture: str, flags: bool = True) -> None:
    """LengenError naming the `given` options (the command line's, even at their default
    values) that a model of `architecture` does not read."""
    unread = set(options_not_read(architecture))
    bad = [name for name in given if name in unread]
    if bad:
        names = ["--" + n.replace("_options", "_option").replace("_", "-") for n in bad] if flags else bad
        raise LengenError(not_applicable(architecture, names))


@functools.cache
def _field_types() -> dict[str, object]:
    hints = {**{f"model.{k}": v for k, v in typing.get_type_hints(ModelConfig).items()},
             **typing.get_type_hints(TrainConfig)}
    return {opt: hints[path] for opt, path in TRAIN_OPTIONS.items()}


def coerce_option(name: str, value):
    """`value` as the type option `name` takes, or LengenError (lengen.options.coerce_value)."""
    return coerce_value(name, value, _field_types()[name])


def config_from_options(options: dict, preset: str | None = None) -> TrainConfig:
    """A TrainConfig from option values (names as in TRAIN_OPTIONS), on top of the named preset
    (options always win over the preset) on top of the TrainConfig defaults."""
    d = TrainConfig().to_dict()
    given = dict(options)
    if preset:
        from lengen.presets import get_preset

        values = {k: v for k, v in get_preset(preset).items() if k != "description"}
        unknown = set(values) - set(TRAIN_OPTIONS)
        if unknown:
            raise LengenError(f"preset {preset!r} sets unknown keys {sorted(unknown)}")
        given = {**values, **given}
    for key, value in given.items():
        if key not in TRAIN_OPTIONS:
            raise LengenError(f"unknown option {key!r}")
        set_path(d, TRAIN_OPTIONS[key], value)
    assert set(d["model"]) <= {f.name for f in fields(ModelConfig)}
    return TrainConfig.from_dict(d)


def option_values(cfg: TrainConfig) -> dict:
    """Every option's value in a config, by option name (for results tables)."""
    d = cfg.to_dict()
    return {name: get_path(d, path) for name, path in TRAIN_OPTIONS.items()}
