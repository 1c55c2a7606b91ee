"""`lengen hf tune`'s files in OUT: the cache of scores, and the records written from it.

OUT/tune_cache.json holds every scored sequence's NLL, written atomically after each one;
rerunning the same command resumes without scoring anything again (a longer --budget searches
further). Another model, length, segment, text or precision is refused for that folder. tune.json
and tune.csv, the records a finished run writes from the cache, are checked when a run starts
(check_records): damaged, of other settings or disagreeing with each other, they are named on
stderr and written again."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from lengen import io
from lengen.errors import LengenError
from lengen.hf.identity import legacy_model, model_fingerprint
from lengen.hf.loading import load_reason
from lengen.hf.settings import TuneSettings
from lengen.protocols.report import csv_disagreement

CACHE_VERSION = 1
# what a cached NLL depends on (besides the tokens, hashed): scores are reused only if all agree
SAME_SCORES = ("gguf_file", "length", "segment", "dtype", "attn", "train_length", "precision")


def cache_key(settings: TuneSettings, train_length: int, tune_tokens: str, model: str | None = None) -> dict:
    """What the cached scores depend on; `model`: the model's fingerprint when already computed
    (it reads every weight: once a run)."""
    key = {k: getattr(settings, k) for k in SAME_SCORES}
    key.update(model=model or model_fingerprint(settings.model_path, settings.gguf_file),
               segment=settings.segment_tokens(), train_length=train_length, tune_tokens=tune_tokens,
               version=CACHE_VERSION)
    return key


def load_cache(out: Path, key: dict, model_path: str) -> dict:
    """The cache in `out` for these settings (a fresh one if none). LengenError if it holds other
    settings or is not a cache at all (damaged: what it held cannot be told apart from noise).
    Entries that are not scores (a damaged part of an intact file) are dropped, named on stderr,
    and scored again."""
    path = Path(out) / "tune_cache.json"
    if not path.is_file():
        return {"settings": key, "tune": {}, "eval": {}}
    try:
        cache = io.read_json(path)
        old = legacy_model(cache["settings"], key, model_path)
        if not isinstance(old, dict):
            raise TypeError
    except ValueError as e:   # not JSON: truncated or overwritten
        raise LengenError(f"{path} is damaged (not JSON: {load_reason(e)}): restore it, or "
                          "delete it to search again from scratch (or use another --out)") from None
    except (OSError, KeyError, TypeError, AttributeError):
        raise LengenError(f"{path} is not a lengen hf tune cache: restore it, or use another --out") from None
    diff = [f"{k}: {old.get(k)!r} there, {v!r} now" for k, v in key.items() if old.get(k) != v]
    if diff:
        raise LengenError(f"{path} holds scores of other settings ({'; '.join(diff)}); use another --out")
    dropped = _drop_damaged(cache)
    if dropped:
        print(f"note: {path}: {len(dropped)} damaged {'entry' if len(dropped) == 1 else 'entries'} dropped "
              f"({', '.join(dropped[:3])}{', ...' if len(dropped) > 3 else ''}); "
              f"{'it is' if len(dropped) == 1 else 'they are'} scored again", file=sys.stderr)
    return cache


def _numbers(x, low: float = -math.inf, high: float = math.inf) -> bool:
    """x is a list of finite numbers in [low, high]."""
    return isinstance(x, list) and all(type(v) in (int, float) and math.isfinite(v) and low <= v <= high for v in x)


def _drop_damaged(cache: dict) -> list[str]:
    """Remove, in place, the entries of `cache` that are not scores as tune() writes them; their names."""
    dropped = []
    for part in ("tune", "eval", "passkey"):
        if not isinstance(cache.get(part), dict):
            if part in cache:
                dropped.append(part)
            cache[part] = {}
    for spec, entry in list(cache["tune"].items()):
        if not (isinstance(entry, dict) and _numbers(entry.get("nll")) and isinstance(entry.get("stopped", False), bool)
                and _numbers(entry.get("seconds", []), 0) and len(entry.get("seconds", [])) <= len(entry["nll"])):
            dropped.append(spec)
            del cache["tune"][spec]
    for part, low, high in (("eval", -math.inf, math.inf), ("passkey", 0, 1)):
        for label, scores in list(cache[part].items()):
            if not isinstance(scores, dict):
                dropped.append(f"{part} {label}")
                del cache[part][label]
                continue
            for spec, value in list(scores.items()):
                if not _numbers(value if part == "eval" else [value], low, high):
                    dropped.append(f"{part} {spec}")
                    del scores[spec]
    if not cache["passkey"]:
        del cache["passkey"]   # as a cache without passkey scores is written
    return dropped


def check_records(out: Path, key: dict) -> None:
    """tune.json and tune.csv, the records a finished run writes from tune_cache.json: without the
    cache they are refused (LengenError: the search they record would start over and replace
    them); damaged, of other settings or disagreeing with each other, they are named on stderr
    and written again from the cache at the end of this run."""
    out = Path(out)
    record, table = out / "tune.json", out / "tune.csv"
    if not (record.exists() or table.exists()):
        return
    if not (out / "tune_cache.json").is_file():
        names = " and ".join(p.name for p in (record, table) if p.exists())
        raise LengenError(f"{out} holds {names} but not tune_cache.json, the scores they record: restore it, or "
                          f"use another --out (delete {names} to search again here)")
    problem = None
    try:
        rec = io.read_json(record) if record.exists() else None
    except (ValueError, OSError) as e:
        rec, problem = None, f"is damaged (not JSON: {load_reason(e)})"
    if problem is None:
        problem = "is missing" if rec is None else _record_problem(rec, key)
    if problem is None:
        disagreement = csv_disagreement(table, rec["ranking"])
        if disagreement:
            print(f"note: {table} disagrees with tune.json ({disagreement}); it is written again from "
                  "tune_cache.json", file=sys.stderr)
        return
    print(f"note: {record} {problem}; tune.json and tune.csv are written again from tune_cache.json",
          file=sys.stderr)


def _record_problem(rec, key: dict) -> str | None:
    """Why `rec` is not a tune.json of these settings, in words; None if it is one."""
    if not (isinstance(rec, dict) and isinstance(rec.get("meta"), dict) and isinstance(rec.get("ranking"), list)
            and all(isinstance(r, dict) for r in rec["ranking"]) and isinstance(rec.get("chosen"), str)
            and isinstance(rec.get("evaluation"), list)):
        return "is not a lengen hf tune record"
    meta = rec["meta"]
    # records before 2026-12-01 have no settings: the key's fields that meta holds under the same names
    old = meta.get("settings") if isinstance(meta.get("settings"), dict) else \
        {k: meta[k] for k in key if k in meta and k not in ("model", "version")}
    diff = [f"{k}: {old.get(k)!r} there, {v!r} now" for k, v in key.items() if k in old and old.get(k) != v]
    return f"records a search of other settings ({'; '.join(diff)})" if diff else None
