"""A local model's identity: what `hf eval` results and `hf tune` caches are keyed by, so that
they follow the model, not the folder it sits in (a folder copied to another machine, or to a
GPU machine's /tmp, resumes its results).

The identity is one sha256 over the files that make the model: config, tokenizer and weights
(with --gguf-file, that file stands for the weights), each whole. Sampling the weights would
miss an edit of a few of them; a whole digest costs about a second per GB, once per run.

The same read checks the weight files' integrity (safetensors: the header's tensors fill the file
exactly; torch zip archives: the archive's end record is there), so a truncated download is one
LengenError before any work, not a loader's traceback after it."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from lengen.errors import LengenError

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
        size = path.stat().st_size
        digest.update(f"{path.name}\0{size}\0".encode())
        with path.open("rb") as f:
            if path.suffix == ".safetensors":
                head = f.read(8)
                header = f.read(int.from_bytes(head, "little")) if len(head) == 8 else b""
                digest.update(head + header)
                _check_safetensors(path, size, head, header)
            first, tail = None, b""
            while chunk := f.read(CHUNK):
                digest.update(chunk)
                first = chunk[:4] if first is None else first
                tail = (tail + chunk[-_ZIP_TAIL:])[-_ZIP_TAIL:]
            if path.suffix in (".bin", ".pt", ".pth"):
                _check_zip(path, first or b"", tail)
    return f"sha256:{digest.hexdigest()[:20]}"


_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
                "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}
_ZIP_TAIL = 22 + 65535   # a zip's end-of-central-directory record: 22 bytes and a comment of up to 64 KiB


def _damaged(path: Path, why: str) -> LengenError:
    return LengenError(f"{path} is damaged ({why}); download or save the model again")


def _check_safetensors(path: Path, size: int, head: bytes, header: bytes) -> None:
    """The header (8-byte length, then JSON) and the tensors it lists must fill the file exactly:
    a truncated file (an interrupted download) holds fewer bytes than its header describes."""
    if len(head) < 8 or len(header) < int.from_bytes(head, "little"):
        raise _damaged(path, f"{size} bytes, shorter than its header")
    try:
        tensors = {k: v for k, v in json.loads(header).items() if k != "__metadata__"}
        ends = [int(t["data_offsets"][1]) for t in tensors.values()]
        bad = next((k for k, t in tensors.items() if t["dtype"] in _DTYPE_BYTES and
                    t["data_offsets"][1] - t["data_offsets"][0] != math.prod(t["shape"]) * _DTYPE_BYTES[t["dtype"]]),
                   None)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise _damaged(path, "its header is not a safetensors header") from None
    if bad is not None:
        raise _damaged(path, f"tensor {bad}'s bytes do not match its shape")
    data = size - 8 - len(header)
    if data != max(ends, default=0):
        raise _damaged(path, f"its header describes {max(ends, default=0):,} bytes of tensors, the file holds "
                             f"{data:,}" + (": truncated" if data < max(ends, default=0) else ""))


def _check_zip(path: Path, magic: bytes, tail: bytes) -> None:
    """A torch.save archive (a zip) ends with the end-of-central-directory record; a truncated one does not."""
    if magic == b"PK\x03\x04" and b"PK\x05\x06" not in tail:
        raise _damaged(path, "the zip archive has no end record: truncated")


def legacy_model(old: dict, key: dict, model_path: str | Path) -> dict:
    """`old` settings written before results were keyed by `model` (they hold `model_path`, the
    resolved folder): the same model where that path is this one's, else a value naming it."""
    if "model" in old or "model_path" not in old:
        return old
    old = dict(old)
    path = old.pop("model_path")
    old["model"] = key["model"] if path == str(Path(model_path).resolve()) else f"the model at {path}"
    return old
