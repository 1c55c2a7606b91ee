"""`lengen train` options as data: the option names shared by the command line, presets and sweep
files, where each lands in TrainConfig, and the one function that turns options into a config."""

from __future__ import annotations

import functools
from dataclasses import fields

from lengen.errors import LengenError
from lengen.models.config import ModelConfig, not_applicable
from lengen.options import coerce_value, set_path, table_types, table_values
from lengen.presets import get_preset
from lengen.che.config import TRAIN_OPTIONS, TrainConfig, options_not_read

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
    return table_types(TrainConfig, TRAIN_OPTIONS)


def coerce_option(name: str, value):
    """`value` as the type option `name` takes, or LengenError (lengen.options.coerce_value)."""
    return coerce_value(name, value, _field_types()[name])


def config_from_options(options: dict, preset: str | None = None) -> TrainConfig:
    """A TrainConfig from option values (names as in TRAIN_OPTIONS), on top of the named preset
    (options always win over the preset) on top of the TrainConfig defaults."""
    d = TrainConfig().to_dict()
    given = dict(options)
    if preset:
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
    return table_values(cfg, TRAIN_OPTIONS)
