"""Atomic file writes: a killed run never leaves a half-written file behind."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from lengen.errors import LengenError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# mkstemp creates 0600 files; run files get the mode any other new file would (0644 under umask 022)
_FILE_MODE = 0o666 & ~_umask()


def cache_root() -> Path:
    """Where lengen caches what it can rebuild (corpus tokens, the compiled kernel): $LENGEN_CACHE,
    else $XDG_CACHE_HOME/lengen, else ~/.cache/lengen."""
    env = os.environ.get("LENGEN_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lengen"


def check_writable(folder: str | Path, hint: str = "choose another --out") -> None:
    """Refuse (LengenError naming `folder`, then `hint`: what to do) a folder lengen is about to
    write into but cannot: one at or under a regular file, or one where no file can be created
    (read-only mount, no permission). `folder` need not exist yet: its nearest existing ancestor
    is tried. Nothing is left behind either way. Call it before the work, not after."""
    folder = Path(folder)
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        what = "" if existing == folder else f"cannot write to {folder}: "
        raise LengenError(f"{what}{existing} is a file, not a folder; {hint}")
    # a real file, not os.access(): root passes os.access(W_OK) on a read-only mount
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".lengen-write-test-")
    except OSError as e:
        where = "" if existing == folder else f" (it would be created in {existing})"
        raise LengenError(f"cannot write to {folder}{where}: {e.strerror}; {hint}") from None
    os.close(fd)
    os.unlink(probe)


def _atomic(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        # torch.save hides a failed write() (a full disk) behind a RuntimeError from its zip writer:
        # raise the OSError itself, naming the file (write() names none), for the CLI's one line
        cause = e if isinstance(e, Exception) else None  # Ctrl-C stays Ctrl-C
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__context__
        if cause is None:
            raise
        if cause.filename is None or cause.filename == tmp:  # the hidden temporary file means nothing to the user
            cause.filename, cause.filename2 = str(path), None
        if cause is e:
            raise
        raise cause from None


@contextlib.contextmanager
def atomic_folder(out: str | Path):
    """A new folder that appears whole or not at all: the block writes into a temporary sibling
    (yielded), renamed to `out` when the block ends, removed if it raises. `out` must not exist."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.resolve().parent))
    try:
        yield tmp
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_text(path: Path, text: str) -> None:
    _atomic(path, lambda f: f.write(text.encode()))


def write_json(path: Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def save_torch(path: Path, obj: Any) -> None:
    _atomic(path, lambda f: torch.save(obj, f))


def load_torch(path: Path) -> Any:
    return torch.load(path, map_location="cpu", weights_only=False)


def save_figure(path: Path, fig) -> None:
    """Save a matplotlib figure atomically (format from the suffix)."""
    fmt = Path(path).suffix.lstrip(".") or "png"
    _atomic(path, lambda f: fig.savefig(f, format=fmt, dpi=120, bbox_inches="tight"))
