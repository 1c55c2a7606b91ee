"""Sweep presets: YAML files shipped in lengen/sweeps/presets/, listed by `lengen sweep presets`."""

from __future__ import annotations

from pathlib import Path

PRESET_DIR = Path(__file__).with_name("presets")


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_path(name: str) -> Path | None:
    path = PRESET_DIR / f"{name}.yaml"
    return path if name and "/" not in name and path.exists() else None
