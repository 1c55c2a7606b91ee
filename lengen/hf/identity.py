"""A local model's identity: what `hf eval` results and `hf tune` caches are keyed by, so that
they follow the model, not the folder it sits in (a folder copied to another machine, or to a
GPU machine's /tmp, resumes its results).

The identity is one sha256 over the files that make the model: config, tokenizer and weights
(with --gguf-file, that file stands for the weights), each whole. Sampling the weights would
miss an edit of a few of them; a whole digest costs about a second per GB, once per run."""

from __future__ import annotations

import hashlib
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
CHUNK = 1 << 24


def model_fingerprint(model_path: str | Path, gguf_file: str | None = None) -> str:
    """"sha256:<20 hex>" of the model in `model_path` (with `gguf_file`, that file stands for
    the weights); "path:<resolved path>" where it is not a folder."""
    folder = Path(model_path)
    if not folder.is_dir():
        return f"path:{folder.resolve()}"
    files = sorted(p for p in folder.iterdir() if p.is_file())
    if gguf_file:   # the other weight files in the folder are not what is loaded
        files = [p for p in files if p.suffix not in WEIGHT_SUFFIXES] + [folder / gguf_file]
    digest = hashlib.sha256()
    for path in files:
        if path.suffix not in WEIGHT_SUFFIXES and path.suffix not in (".json", ".model", ".txt"):
            continue   # a README, a license: not the model
        digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
    return f"sha256:{digest.hexdigest()[:20]}"


def legacy_model(old: dict, key: dict, model_path: str | Path) -> dict:
    """`old` settings written before results were keyed by `model` (they hold `model_path`, the
    resolved folder): the same model where that path is this one's, else a value naming it."""
    if "model" in old or "model_path" not in old:
        return old
    old = dict(old)
    path = old.pop("model_path")
    old["model"] = key["model"] if path == str(Path(model_path).resolve()) else f"the model at {path}"
    return old
