"""Which files make up a corpus: a file, a folder, a glob, or (the default) the Python standard
library of the running interpreter, which every machine with Python has offline."""

from __future__ import annotations

import glob
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from lengen.errors import LengenError

# Not part of the standard library proper (installed packages) or mostly generated/repetitive.
STDLIB_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
GLOB_CHARS = set("*?[")


@dataclass
class SourceFiles:
    label: str          # human-readable description of the source
    root: Path          # document names are relative to it
    files: list[Path]   # sorted

    def name(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _walk(root: Path, pattern: str, skip: set[str]) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
        out += [Path(dirpath) / f for f in filenames if Path(f).match(pattern) and not f.startswith(".")]
    return sorted(p for p in out if p.is_file())


def resolve_source(source: str | None) -> SourceFiles:
    """None -> the standard library's *.py files; a file; a folder (all files below it);
    or a glob (`**` recursive). Raises LengenError when nothing matches."""
    if source is None or source == "stdlib":
        root = stdlib_root()
        files = _walk(root, "*.py", STDLIB_SKIP_DIRS)
        if not files:
            raise LengenError(f"no Python files found in the standard library at {root}")
        return SourceFiles(f"stdlib:{root}", root, files)
    path = Path(source).expanduser()
    if path.is_file():
        return SourceFiles(str(path), path.parent.resolve(), [path.resolve()])
    if path.is_dir():
        root = path.resolve()
        files = _walk(root, "*", {"__pycache__"})
        if not files:
            raise LengenError(f"corpus folder {source} holds no files")
        return SourceFiles(str(path), root, files)
    if not GLOB_CHARS & set(source):
        raise LengenError(f"corpus {source!r} does not exist (give a file, a folder or a glob)")
    files = sorted({Path(p).resolve() for p in glob.glob(os.path.expanduser(source), recursive=True)
                    if Path(p).is_file()})
    if not files:
        raise LengenError(f"corpus glob {source!r} matches no files")
    root = Path(os.path.commonpath([str(f.parent) for f in files]))
    return SourceFiles(source, root, files)
