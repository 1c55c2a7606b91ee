"""Calibration for methods that read a model's q and k first: the text (`calibration_ids`), the
model's identity (`weights_digest`), DPE's key frequency pairs (`dpe_key_pairs`) and DoPE's heads
(`dope_heads`), cached; `calibrate` sets them on the method parts lengen.hf.extend builds.

The capture itself is lengen.hf.patch.capture_qk (a transformers causal LM run on token ids, each
layer's UN-rotated q and k handed to a reducer, on lengen's own attention route: patch.observe);
`dpe_key_pairs` takes it as an argument, since lengen.hf.extend (patch) calls this module.

    patch.capture_qk(model, ids, reducer)   # reducer(layer_index, q [B,H,T,d], k [B,Hkv,T,d])

DPE's key pairs (Lu et al. 2025): per layer and head, the top-k pairs by the mean over tokens of
|q_t[h, j]| |k_t[kv(h), j]| (lengen.extrapolation.dpe.PairScores). The text is, by default, the
one `lengen hf eval` and `lengen hf tune` read: the Python standard library's sources, tokenized
by the model's tokenizer, CALIBRATION_SEQUENCES sequences of min(L0, CALIBRATION_TOKENS) tokens.
DoPE's heads (Xiong et al. 2025): the per-head scores of one sequence at the target length
factor * L0, the model running Dynamic NTK (lengen.extrapolation.dope.GramScores).
The result is cached in lengen's cache folder (lengen.io.cache_root), one small JSON file per
(weights digest, token ids, the method's calibration options), written atomically and re-checked when read: a damaged or
foreign file is named on stderr and calibrated again, never used.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from lengen import io
from lengen.data import load_documents, long_sequences
from lengen.errors import LengenError
from lengen.extrapolation.dope import Dope, GramScores, choose_heads
from lengen.extrapolation.dpe import Dpe, PairScores, top_pairs
from lengen.hf.loading import bos_prefix, corpus_encoder

CALIBRATION_SEQUENCES = 4
CALIBRATION_TOKENS = 2048
DOPE_SEQUENCES = 1
CACHE_VERSION = 1

Reducer = Callable[[int, torch.Tensor, torch.Tensor], None]
Capture = Callable[..., None]   # lengen.hf.patch.capture_qk(model, ids, reducer, method="rope")


@dataclass(frozen=True)
class CalibrationText:
    """The text a calibrated method reads: `source` (a file, folder or glob, as `--text` takes;
    None: the standard library) tokenized by `tokenizer`. `lengen hf eval` and `hf tune` pass their
    run's text, so a run on a carried corpus calibrates on it, not on the running Python's library."""
    tokenizer: object
    source: str | None = None


def calibration_ids(model: nn.Module, tokenizer=None, source: str | None = None, length: int | None = None,
                    count: int = CALIBRATION_SEQUENCES, who: str = "dpe") -> torch.Tensor:
    """[count, length] token ids of `source` (None: the standard library) by `tokenizer` (None:
    the one in the model's folder), each beginning with the tokenizer's BOS where it adds one,
    as `lengen hf eval` builds its sequences (lengen.data.long_sequences); where those are fewer
    than `count` (a text of a few long documents), the long documents' next pieces in order."""
    tokenizer = tokenizer or _folder_tokenizer(model, who)
    length = int(length or min(model.config.max_position_embeddings, CALIBRATION_TOKENS))
    docs = load_documents(source, corpus_encoder(tokenizer))
    prefix = np.array(bos_prefix(tokenizer), dtype=np.int64)
    n = length - len(prefix)
    pieces = long_sequences(docs.docs, n, count, docs.eos)
    if len(pieces) < count:   # a text of few long documents (one book): their further pieces, in order
        pieces += [d[i:i + n].astype(np.int64) for d in docs.docs for i in range(n, len(d) - n + 1, n)]
    seqs = [np.concatenate([prefix, s]) for s in pieces[:count]]
    if len(seqs) < count:
        raise LengenError(f"the calibration text {docs.source} gives {len(seqs)} sequences of {length} tokens, "
                          f"{count} needed")
    return torch.from_numpy(np.stack(seqs))


def _folder_tokenizer(model: nn.Module, who: str):
    what, without = KINDS[who].needs, KINDS[who].without
    path = getattr(model.config, "_name_or_path", "") or ""
    if not path or not Path(path).is_dir():
        raise LengenError(f"{who}: calibrating {what} needs text: pass calibration= (token ids [N, T] "
                          f"or a tokenizer), or {without} (no calibration); the model has no local "
                          "folder to read a tokenizer from")
    import transformers   # optional (lengen[hf]): imported on use

    try:
        return transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise LengenError(f"{who}: calibrating {what} needs the tokenizer in {path}, which does not load "
                          f"({str(e).splitlines()[0][:160]}): pass calibration= (token ids [N, T], a tokenizer or a CalibrationText)") from None


def weights_digest(model: nn.Module) -> str:
    """sha256 (20 hex) over the model's state dict: names, dtypes, shapes and bytes. Kept per model
    object while no tensor is replaced or changed in place (storage and version counter): hf eval
    and hf tune extend the same model once per method, and reading 16 GB each time is seconds."""
    tensors = sorted(model.state_dict().items())
    stamp = tuple((name, t.data_ptr(), t._version) for name, t in tensors)
    if model in _DIGESTS and _DIGESTS[model][0] == stamp:
        return _DIGESTS[model][1]
    digest = hashlib.sha256()
    for name, t in tensors:
        t = t.detach().reshape(-1).contiguous().cpu()
        digest.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes())
    _DIGESTS[model] = (stamp, digest.hexdigest()[:20])
    return _DIGESTS[model][1]


_DIGESTS: "weakref.WeakKeyDictionary[nn.Module, tuple]" = weakref.WeakKeyDictionary()


def calibrate(model: nn.Module, parts: list, capture: Capture, calibration=None,
              train_length: int | None = None) -> None:
    """Set what each of `parts` (method parts with needs_calibration: DPE, DoPE) reads from the
    model: DPE's key pairs, DoPE's heads. One pass per distinct setting (the cache dedupes)."""
    for part in parts:
        if isinstance(part, Dpe):
            part.set_key_pairs(dpe_key_pairs(model, part, capture, calibration, train_length))
        elif isinstance(part, Dope):
            part.set_heads(dope_heads(model, part, capture, calibration, train_length))
        else:
            raise TypeError(f"no calibration for {part}")


def _token_ids(model: nn.Module, calibration, length: int, count: int, who: str) -> torch.Tensor:
    if torch.is_tensor(calibration):
        ids = calibration.long()
        if ids.dim() != 2 or ids.numel() == 0:
            raise LengenError(f"{who}: calibration token ids must be [sequences, tokens], got {tuple(ids.shape)}")
        return ids
    if isinstance(calibration, CalibrationText):
        return calibration_ids(model, calibration.tokenizer, calibration.source, length, count, who)
    return calibration_ids(model, calibration, length=length, count=count, who=who)


def _cached(kind: str, key: dict, compute: Callable[[], dict], encode: Callable[[dict], dict],
            decode: Callable[[dict], tuple[dict | None, str]], use_cache: bool) -> dict:
    """compute() -> {layer: tensor}, kept in cache_root()/kind/ as {"settings": key, "layers":
    encode(result)}; a file whose settings differ, or that decode() refuses, is named and rebuilt."""
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    path = io.cache_root() / kind / f"{KINDS[kind].prefix}-{name}.json"
    if use_cache and path.exists():
        cached, problem = _read(path, key, decode, kind)
        if cached is not None:
            return cached
        print(f"note: {path} {problem}; calibrating the {KINDS[kind].label} again", file=sys.stderr)
    result = compute()
    if use_cache:
        io.write_json(path, {"settings": key, "layers": encode(result)})
    return result


@dataclass(frozen=True)
class Kind:
    """What one method calibrates, as its cache file and its messages name it."""
    prefix: str        # the cache file's name begins with it
    label: str         # "calibrating the <label> again"
    stored: str        # "holds the <stored> of other settings"
    options: str       # the options that make settings other
    needs: str         # "calibrating <needs> needs text"
    without: str       # the option that needs no calibration


KINDS = {"dpe": Kind("key-pairs", "DPE key pairs", "key pairs", "topk", "the key pairs", "topk= every pair"),
         "dope": Kind("head-scores", "DoPE head scores", "head scores", "rank or factor", "the heads", "count=0")}


def dpe_key_pairs(model: nn.Module, dpe: Dpe, capture: Capture, calibration=None, train_length: int | None = None,
                  use_cache: bool = True) -> dict[int, torch.Tensor]:
    """{layer index: [H, n_pairs] bool} of `dpe.topk` pairs per head, for DPE on `model`, scored
    by lengen.extrapolation.dpe.PairScores over `capture` (lengen.hf.patch.capture_qk).
    `calibration`: token ids [N, T], a tokenizer (the standard library's text), a CalibrationText
    (a tokenizer and a text), or None (the tokenizer in the model's folder); sequences of min(train_length, CALIBRATION_TOKENS) tokens.
    Cached (module docstring) unless use_cache is False."""
    ids = _token_ids(model, calibration, min(train_length or CALIBRATION_TOKENS, CALIBRATION_TOKENS),
                     CALIBRATION_SEQUENCES, "dpe")
    key = {"model": weights_digest(model), "tokens": hashlib.sha256(ids.numpy().tobytes()).hexdigest()[:20],
           "shape": list(ids.shape), "topk": dpe.topk, "pairs": dpe.n_pairs, "version": CACHE_VERSION}

    def compute():
        scores = PairScores(2 * dpe.n_pairs)
        capture(model, ids, scores)
        return top_pairs(scores.scores(), dpe.topk)

    def encode(pairs):
        return {str(layer): [torch.nonzero(row).flatten().tolist() for row in mask] for layer, mask in pairs.items()}

    def decode(layers):
        out = {}
        for layer, heads in layers.items():
            if not (layer.isdigit() and isinstance(heads, list) and heads and all(
                    isinstance(h, list) and len(h) == key["topk"] and len(set(h)) == len(h)
                    and all(type(j) is int and 0 <= j < key["pairs"] for j in h) for h in heads)):
                return None, f"is damaged (layer {layer!r} is not {key['topk']} distinct pair indices per head)"
            mask = torch.zeros(len(heads), key["pairs"], dtype=torch.bool)
            for h, row in enumerate(heads):
                mask[h, row] = True
            out[int(layer)] = mask
        return out, ""

    return _cached("dpe", key, compute, encode, decode, use_cache)


def dope_heads(model: nn.Module, dope: Dope, capture: Capture, calibration=None, train_length: int | None = None,
               use_cache: bool = True) -> dict[int, torch.Tensor]:
    """{layer index: [H] bool}: DoPE's `dope.count` heads, ranked over all layers by the truncated
    effective rank of their query Gram (lengen.extrapolation.dope.GramScores, after the Dynamic NTK
    rotation), on DOPE_SEQUENCES sequence(s) of the target length factor * train_length (the paper
    calibrates at the test length), the model running Dynamic NTK. The per-head scores are cached
    (module docstring), so another count or order needs no pass."""
    L0 = int(train_length or dope.rope.train_length)
    ids = _token_ids(model, calibration, max(L0, round(dope.factor * L0)), DOPE_SEQUENCES, "dope")
    key = {"model": weights_digest(model), "tokens": hashlib.sha256(ids.numpy().tobytes()).hexdigest()[:20],
           "shape": list(ids.shape), "rank": dope.rank, "factor": dope.factor, "indicator": "query",
           "stage": "post_ntk", "version": CACHE_VERSION}

    def compute():
        grams = GramScores(dope)
        capture(model, ids, grams, method=dope.calibration_spec())
        return grams.scores()

    def encode(scores):
        return {str(layer): [None if math.isnan(v) else v for v in row.tolist()] for layer, row in scores.items()}

    def decode(layers):
        out = {}
        for layer, row in layers.items():
            if not (layer.isdigit() and isinstance(row, list) and row
                    and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in row)):
                return None, f"is damaged (layer {layer!r} is not one score per head)"
            out[int(layer)] = torch.tensor([math.nan if v is None else float(v) for v in row], dtype=torch.float64)
        return out, ""

    return choose_heads(dope, _cached("dope", key, compute, encode, decode, use_cache))


def _read(path: Path, key: dict, decode, kind: str) -> tuple[dict | None, str]:
    """(the cached layers, "") or (None, why the file cannot be used)."""
    try:
        data = io.read_json(path)
    except (ValueError, OSError) as e:
        return None, f"is damaged (not JSON: {str(e).splitlines()[0][:80]})"
    if not isinstance(data, dict) or not isinstance(data.get("layers"), dict):
        return None, "is not a lengen calibration file"
    if data.get("settings") != key:
        return None, f"holds the {KINDS[kind].stored} of other settings (another model, text or {KINDS[kind].options})"
    out, problem = decode(data["layers"])
    if not out:
        return None, problem or "is damaged (no layers)"
    return out, ""
