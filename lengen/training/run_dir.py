"""A run directory: config.json, checkpoint.pt, metrics.jsonl, results. Every file is written
atomically; a killed run loses only the steps since its last checkpoint, and rerunning the same
command resumes from it. A directory that holds a different config is refused, untouched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lengen import io
from lengen.errors import LengenError


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for key, value in d.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else key))
    return out


class RunDir:
    CONFIG = "config.json"
    CHECKPOINT = "checkpoint.pt"
    METRICS = "metrics.jsonl"

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def exists(self) -> bool:
        return self.file(self.CONFIG).exists()

    def read_config(self) -> dict:
        if not self.exists:
            raise LengenError(f"{self.path} is not a lengen run directory (no {self.CONFIG})")
        return io.read_json(self.file(self.CONFIG))

    def claim(self, config: dict, identity_keys: list[str] | None = None) -> bool:
        """Write config.json, or check it matches the one already there. Only the keys in
        `identity_keys` (all keys when None) must match; the others (the number of steps, the
        evaluation settings) may change between runs of one directory. Returns True when
        resuming an existing run."""
        if self.path.exists() and not self.path.is_dir():
            raise LengenError(f"{self.path} exists and is not a directory")
        if self.exists:
            old = _flatten(self.read_config())
            new = _flatten(config)
            keys = set(old) | set(new)
            if identity_keys is not None:
                keys = {k for k in keys if any(k == p or k.startswith(p + ".") for p in identity_keys)}
            diff = sorted(k for k in keys if old.get(k) != new.get(k))
            if diff:
                shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in diff[:5])
                raise LengenError(
                    f"run directory {self.path} holds another config ({shown}); "
                    f"use another --out or delete the directory"
                )
            io.write_json(self.file(self.CONFIG), config)  # record changed non-identity settings
            return True
        if self.path.is_dir() and any(self.path.iterdir()):
            raise LengenError(f"{self.path} is not empty and holds no lengen run; use another --out")
        io.write_json(self.file(self.CONFIG), config)
        return False

    # -- checkpoints and metrics ---------------------------------------------------------------
    def load_checkpoint(self) -> dict | None:
        path = self.file(self.CHECKPOINT)
        return io.load_torch(path) if path.exists() else None

    def save_checkpoint(self, state: dict, metrics: list[dict]) -> None:
        """Metrics are rewritten with the checkpoint, so the two never disagree after a kill."""
        io.save_torch(self.file(self.CHECKPOINT), state)
        io.write_text(self.file(self.METRICS), "".join(json.dumps(m) + "\n" for m in metrics))

    def read_metrics(self) -> list[dict]:
        path = self.file(self.METRICS)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
