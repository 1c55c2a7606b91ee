"""`lengen presets`: named defaults that reproduce the seeds' experiments."""

from __future__ import annotations

from lengen.presets import PRESETS


def run(args) -> int:
    for name, preset in PRESETS.items():
        settings = ", ".join(f"{k}={v}" for k, v in preset.items() if k != "description")
        print(f"{name}\n    {preset.get('description', '')}\n    {settings}")
    return 0
