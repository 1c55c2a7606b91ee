"""`lengen presets`: named defaults that reproduce the seeds' experiments."""

from __future__ import annotations

from lengen.presets import PRESETS


def add_parser(sub) -> None:
    p = sub.add_parser("presets", help="list the presets of `lengen train --preset`", description=__doc__)
    p.set_defaults(func=run)


def run(args) -> int:
    for name, preset in PRESETS.items():
        settings = ", ".join(f"{k}={v}" for k, v in preset.items() if k != "description")
        print(f"{name}\n    {preset.get('description', '')}\n    {settings}")
    return 0
