"""Long documents from local text files, deterministically.

Files are read in sorted order and their tokens concatenated (each file tokenized on its own)
until a document has the required number of tokens; the next document starts with the next file.
The default corpus is the Python standard library's source of the running interpreter: present
on every machine, nothing to download, and long-range structure (imports, definitions used far
below) to reward long contexts. Different Python versions give different documents, so results
record the corpus path and the Python version.
"""

from __future__ import annotations

import glob
import sysconfig
from pathlib import Path
from typing import Callable

from lengen.errors import LengenError

SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(spec: str | None = None) -> list[Path]:
    """The files of a corpus: None = the stdlib's *.py files; else a file, a folder (all files
    below it) or a glob pattern (`**` allowed). Sorted by path."""
    if spec is None:
        root = stdlib_root()
        files = [p for p in root.rglob("*.py") if not SKIP_DIRS & set(p.relative_to(root).parts)]
        return sorted(files, key=lambda p: p.relative_to(root).as_posix())
    path = Path(spec).expanduser()
    if path.is_file():
        return [path]
    if path.is_dir():
        files = [p for p in path.rglob("*") if p.is_file() and not SKIP_DIRS & set(p.parts)]
    else:
        files = [Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file()]
    if not files:
        raise LengenError(f"--corpus {spec!r}: no files found")
    return sorted(files)


def documents(files: list[Path], encode: Callable[[str], list[int]], count: int,
              tokens: int) -> list[list[int]]:
    """`count` documents of exactly `tokens` tokens each (see the module docstring)."""
    docs: list[list[int]] = []
    current: list[int] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if not text.strip():
            continue
        current.extend(encode(text if text.endswith("\n") else text + "\n"))
        if len(current) >= tokens:
            docs.append(current[:tokens])
            current = []
            if len(docs) == count:
                return docs
    raise LengenError(f"the corpus ({len(files)} files) gives only {len(docs)} documents of "
                      f"{tokens} tokens, {count} needed: use a larger --corpus or fewer --docs")
