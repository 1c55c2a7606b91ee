"""Options as data: a command's option names map to dotted paths in a nested config dict
("model.pe" is ModelConfig.pe inside a TrainConfig or LMConfig). Shared by lengen.che.options,
lengen.lm.options and lengen.mlm.options, so the command line, presets and sweep files set configs
one way."""

from __future__ import annotations

import dataclasses
import functools
import math
import typing

from lengen.errors import LengenError
from lengen.formatting import parse_value


def set_path(target: dict, dotted: str, value) -> None:
    """target["a"]["b"] = value for dotted "a.b" (intermediate dicts created)."""
    keys = dotted.split(".")
    for k in keys[:-1]:
        target = target.setdefault(k, {})
    target[keys[-1]] = value


def config_from_table(cls, table: dict[str, str], options: dict):
    """`cls` (a run config dataclass with to_dict/from_dict) from option values named as in `table`
    (option -> dotted config path), on top of the defaults; LengenError for an unknown option."""
    d = cls().to_dict()
    for key, value in options.items():
        if key not in table:
            raise LengenError(f"unknown option {key!r}")
        set_path(d, table[key], value)
    return cls.from_dict(d)


def flatten(d, prefix: str = "") -> dict:
    """A nested config dict as {dotted path: value} ("model.pe": "rope")."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict = {}
    for key, value in d.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else key))
    return out


def get_path(source: dict, dotted: str):
    for key in dotted.split("."):
        source = source[key]
    return source


def table_types(cls, table: dict[str, str]) -> dict[str, object]:
    """Each option's type hint, by option name: the field at its dotted path (`table`: option ->
    path) in the config dataclass `cls`, through nested dataclasses ("model.pe": ModelConfig.pe)."""
    types = {}
    for name, dotted in table.items():
        kind = cls
        for key in dotted.split("."):
            kind = typing.get_type_hints(kind)[key]
        types[name] = kind
    return types


def table_values(cfg, table: dict[str, str]) -> dict:
    """Every option's value in a config (with to_dict), by option name, in `table`'s order."""
    d = cfg.to_dict()
    return {name: get_path(d, dotted) for name, dotted in table.items()}


def coerce_value(name: str, value, kind):
    """`value` as type `kind` (a field's type hint: int, float, str, bool, dict, or X | None) for
    option `name`, or LengenError. Accepts what YAML gives: ints for floats, and numeric strings
    for floats (YAML 1.1 reads `1e-4` as a string). A list type takes a list (or one value)."""
    if typing.get_origin(kind) is list:
        (item,) = typing.get_args(kind)
        values = value if isinstance(value, list) else [value]
        return [coerce_value(f"{name}[{i}]", v, item) for i, v in enumerate(values)]
    allowed = typing.get_args(kind) or (kind,)
    if value is None:
        if type(None) in allowed:
            return None
        raise LengenError(f"{name} cannot be null")
    if bool in allowed:
        if isinstance(value, bool):
            return value
        raise LengenError(f"{name} must be true or false, got {value!r}")
    if int in allowed:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise LengenError(f"{name} must be an integer, got {value!r}")
    if float in allowed:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise LengenError(f"{name} must be a number, got {value!r}")
    if dict in allowed:
        if isinstance(value, dict):
            return {str(k).replace("-", "_"): v for k, v in value.items()}
        raise LengenError(f"{name} must be a mapping of KEY: VALUE, got {value!r}")
    if str in allowed:
        if isinstance(value, str):
            return value
        raise LengenError(f"{name} must be a string, got {value!r}")
    return value


def non_finite(value) -> bool:
    """Whether `value` is NaN or infinite: a float, or text that float() reads so ("nan", "inf",
    "1e999"), since option values given as text become numbers through float() later."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return False
    return isinstance(value, float) and not math.isfinite(value)


def check_finite(name: str, value) -> None:
    """LengenError when `value` (or an item of a list or dict in it) is NaN or infinite: no number
    lengen reads means anything then, and torch either raises a traceback or trains on NaN."""
    if isinstance(value, dict):
        for key, item in value.items():
            check_finite(f"{name} {key}", item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            check_finite(name, item)
    elif non_finite(value):
        raise LengenError(f"{name} must be a finite number, got {value}")


def check_finite_fields(cfg) -> None:
    """check_finite on every number of a config dataclass: its floats, text in a float field,
    and its option dicts (pe_options -> "pe-option KEY"), named as the range checks name them.
    Nested dataclasses (the ModelConfig) check themselves in their own validate()."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        name = f.name.replace("_", "-")
        if isinstance(value, dict):
            check_finite(name.replace("-options", "-option"), value)
        elif isinstance(value, float):
            check_finite(name, value)
        elif isinstance(value, str) and f.name in _float_fields(type(cfg)):
            check_finite(name, value)  # "nan" in a float field (a hand-edited config) is float("nan")


@functools.cache
def _float_fields(cls) -> frozenset[str]:
    hints = typing.get_type_hints(cls)
    return frozenset(n for n, kind in hints.items() if float in (typing.get_args(kind) or (kind,)))


def parse_key_values(items: list[str] | None, flag: str) -> dict:
    """['init_L=40', 'mlp_depth=2'] -> {'init_L': 40, 'mlp_depth': 2}: the values of a repeatable
    KEY=VALUE flag. A key given twice is refused: which of the two was meant is not ours to guess."""
    out, given = {}, {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise LengenError(f"{flag} expects KEY=VALUE, got {item!r}")
        name = key.strip().replace("-", "_")
        if name in out:
            raise LengenError(f"{flag} {key.strip()} is given twice ({given[name]!r} and {item!r}); give it once")
        check_finite(f"{flag} {key.strip()}", value.strip())
        out[name], given[name] = parse_value(value.strip()), item
    return out
