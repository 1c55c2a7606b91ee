"""A run directory: config.json, checkpoint.pt, metrics.jsonl, results. Every file is written
atomically; a killed run loses only the steps since its last checkpoint, and rerunning the same
command resumes from it. A directory that holds a different config is refused, untouched."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from lengen import io
from lengen.errors import LengenError, reason
from lengen.options import flatten, get_path


def config_digest(cfg, keys=None) -> str:
    """12 hex digits of the SHA-256 of `cfg`'s fields `keys` (default: its IDENTITY, what defines the
    checkpoint), sorted. A field added since (`cfg.ADDED_FIELDS`, dotted path -> default) counts only
    when it differs from its default, so files written before it keep their digest. Evaluation
    records carry it (`config_digest`) so a copy from another run is told apart."""
    d = cfg.to_dict()
    d = {k: v for k, v in d.items() if k in (cfg.IDENTITY if keys is None else keys)}
    for dotted, default in getattr(cfg, "ADDED_FIELDS", {}).items():
        *parents, key = dotted.split(".")
        try:
            holder = get_path(d, ".".join(parents)) if parents else d
        except KeyError:  # a field outside `keys`
            continue
        if holder.get(key, default) == default:
            holder.pop(key, None)
    blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def run_id(cfg) -> str:
    """A run's id: 12 hex digits of the SHA-256 of its config less where it runs (`cfg.RUNTIME`);
    a sweep names its run folders by it, and a run started from another's weights records it."""
    return config_digest(cfg, [k for k in cfg.to_dict() if k not in cfg.RUNTIME])


def record_mismatch(record, expected: dict) -> str | None:
    """Why `record` (an evaluation record read from a run directory) is not the one `expected`
    describes (field -> value), or None: "damaged (...)", "another run's (...)" or "for KEY X, not
    Y". A record without `config_digest` (written before records carried it) is judged by its
    other fields."""
    if not isinstance(record, dict):
        return "damaged (not a JSON object)"
    for key, value in expected.items():
        if key not in record:
            if key == "config_digest":
                continue
            return f"damaged (no {key!r})"
        if record[key] != value:
            return "another run's (its settings digest differs)" if key == "config_digest" else \
                f"for {key} {record[key]!r}, not {value!r}"
    return None


def _differences(old: dict, new: dict, identity_keys: list[str] | None) -> str:
    """The first five identity fields on which two configs differ ("key: old -> new"), or ""."""
    old, new = flatten(old), flatten(new)
    keys = set(old) | set(new)
    if identity_keys is not None:
        keys = {k for k in keys if any(k == p or k.startswith(p + ".") for p in identity_keys)}
    diff = sorted(k for k in keys if old.get(k) != new.get(k))
    return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in diff[:5])


#: what a training command writes into its run directory: another command replaces one of them
#: only when told to (--force)
RUN_FILES = ("config.json", "checkpoint.pt", "metrics.jsonl", "eval.json", "accuracy.png")


def check_output_file(out: str | Path, force: bool = False, flag: str = "--out") -> None:
    """Refuse (LengenError), before any work, an output file `out` given as `flag`: a folder, or one
    of the files a training run owns (RUN_FILES, in a folder holding a config.json) unless `force`.
    Messages name `out` as it was given."""
    out = Path(out)
    if out.is_dir():
        raise LengenError(f"{flag} {out} is a folder; give the file to write (e.g. {out / 'NAME.json'})")
    if not force and out.name in RUN_FILES and (out.parent / "config.json").is_file():
        raise LengenError(f"{flag} {out} is the training run's own {out.name}; give another file, or add "
                          f"--force to replace it")


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
            shown = _differences(normalize(saved) if normalize else saved, config, identity_keys)
            if shown:
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
    def load_checkpoint(self, config: dict | None = None, identity_keys: list[str] | None = None,
                        normalize=None) -> dict | None:
        """The checkpoint, or None when there is none. With `config` (training resumes from it):
        LengenError when the checkpoint was saved by a run of another config (a copy from another
        run directory), on `identity_keys`; `normalize` brings its saved config to the current
        schema. A damaged file's message advises what fits: restarting the run when training
        resumes, keeping the file for another try when the weights are only read (eval, inspect)."""
        path = self.file(self.CHECKPOINT)
        if not path.exists():
            return None
        try:
            ckpt = io.load_torch(path)
        except Exception as e:  # noqa: BLE001 - torch raises several kinds for a truncated file
            advice = ("delete it to restart the run from step 0" if config is not None else
                      "the trained weights cannot be read: put back a good copy, or train the run again "
                      "(its training command starts from step 0 once the file is deleted)")
            raise LengenError(f"{path} is damaged ({reason(e)}); {advice}") from None
        saved = ckpt.get("config") if isinstance(ckpt, dict) else None
        if config is not None and isinstance(saved, dict):  # checkpoints record their config
            try:
                shown = _differences(normalize(saved) if normalize else saved, config, identity_keys)
            except LengenError as e:
                shown = str(e)
            if shown:
                raise LengenError(f"{path} is another run's checkpoint ({shown}); delete it to restart "
                                  "the run from step 0, or put back this run's own") from None
        return ckpt

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
