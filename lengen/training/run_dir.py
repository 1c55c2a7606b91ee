"""A run directory: config.json, checkpoint.pt, metrics.jsonl, results. Every file is written
atomically; a killed run loses only the steps since its last checkpoint, and rerunning the same
command resumes from it. A directory that holds a different config is refused, untouched."""

from __future__ import annotations

import json
from pathlib import Path

from lengen import io
from lengen.errors import LengenError
from lengen.options import flatten


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
        try:
            config = io.read_json(self.file(self.CONFIG))
        except (OSError, ValueError) as e:
            raise LengenError(f"{self.file(self.CONFIG)} is damaged ({' '.join(str(e).split())}); "
                              "delete the run directory to start over") from None
        if not isinstance(config, dict):
            raise LengenError(f"{self.file(self.CONFIG)} is damaged (not a JSON object); "
                              "delete the run directory to start over")
        return config

    def check(self, config: dict, identity_keys: list[str] | None = None, normalize=None) -> bool:
        """Whether `config` may use this directory, without writing anything: True when it
        resumes a run here. Only the keys in `identity_keys` (all keys when None) must match; the
        others (steps, evaluation settings) may change between runs of one directory. A directory
        whose config differs but that holds no checkpoint (a start that failed before its first
        checkpoint) is free: the new config replaces the old one. `normalize` brings the saved
        config to the current schema first (renamed keys, fields added since, with defaults)."""
        if self.path.exists() and not self.path.is_dir():
            raise LengenError(f"{self.path} exists and is not a directory")
        if self.exists:
            if not self.file(self.CHECKPOINT).exists():
                return False
            saved = self.read_config()
            old = flatten(normalize(saved) if normalize else saved)
            new = flatten(config)
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
            return True
        if self.path.is_dir() and any(self.path.iterdir()):
            raise LengenError(f"{self.path} is not empty and holds no lengen run; use another --out")
        return False

    def claim(self, config: dict, identity_keys: list[str] | None = None, normalize=None) -> bool:
        """check(), then write config.json (recording changed non-identity settings). Returns
        True when resuming an existing run."""
        resuming = self.check(config, identity_keys, normalize)
        if not resuming:
            for stale in (self.METRICS, "eval.json"):  # left by a start that never checkpointed
                self.file(stale).unlink(missing_ok=True)
        io.write_json(self.file(self.CONFIG), config)
        return resuming

    # -- checkpoints and metrics ---------------------------------------------------------------
    def load_checkpoint(self) -> dict | None:
        path = self.file(self.CHECKPOINT)
        if not path.exists():
            return None
        try:
            return io.load_torch(path)
        except Exception as e:  # noqa: BLE001 - torch raises several kinds for a truncated file
            raise LengenError(f"{path} is damaged ({type(e).__name__}: {' '.join(str(e).split())[:120]}); "
                              "delete it to restart the run from step 0") from None

    def save_checkpoint(self, state: dict, metrics: list[dict]) -> None:
        """The checkpoint, then metrics.jsonl rewritten with the rows up to it."""
        io.save_torch(self.file(self.CHECKPOINT), state)
        self.write_metrics(metrics)

    def write_metrics(self, metrics: list[dict]) -> None:
        io.write_text(self.file(self.METRICS), "".join(json.dumps(m) + "\n" for m in metrics))

    def read_metrics(self) -> list[dict]:
        path = self.file(self.METRICS)
        if not path.exists():
            return []
        rows = []
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                raise LengenError(f"{path} is damaged (line {i} is not JSON); delete it and its "
                                  "checkpoint.pt to restart the run") from None
        return rows
