"""The on-disk token cache: one .npz per (source files, their sizes and mtimes, tokenizer), so a
second load reads one file instead of re-reading and re-tokenising every document. Written
atomically; a stale entry is never reused because any change to a file changes the key."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from lengen import io


def cache_dir() -> Path:
    """lengen's cache folder (lengen.io.cache_root: $LENGEN_CACHE, else ~/.cache/lengen)."""
    return io.cache_root()


def cache_key(source_label: str, names: list[str], files: list[Path], tokenizer_name: str) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([source_label, tokenizer_name]).encode())
    for name, f in zip(names, files):
        st = f.stat()
        h.update(json.dumps([name, st.st_size, st.st_mtime_ns]).encode())
    return h.hexdigest()[:20]


def save_arrays(path: Path, **arrays: np.ndarray) -> None:
    io._atomic(Path(path), lambda f: np.savez(f, **arrays))


def load_arrays(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays, or None for a missing or unreadable (e.g. truncated by a crash) file."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, KeyError):
        return None
