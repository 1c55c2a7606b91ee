"""Options as data: a command's option names map to dotted paths in a nested config dict
("model.pe" is ModelConfig.pe inside a TrainConfig or LMConfig). Shared by lengen.training.options
and lengen.lm.options, so the command line, presets and sweep files set configs one way."""

from __future__ import annotations


def set_path(target: dict, dotted: str, value) -> None:
    """target["a"]["b"] = value for dotted "a.b" (intermediate dicts created)."""
    keys = dotted.split(".")
    for k in keys[:-1]:
        target = target.setdefault(k, {})
    target[keys[-1]] = value


def get_path(source: dict, dotted: str):
    for key in dotted.split("."):
        source = source[key]
    return source
