"""`lengen hf tune` / lengen.hf.tune(...): choose a training-free RoPE extension and its options for
a local Hugging Face model at one target length, on text, within a time budget.

The objective is last-segment perplexity (lengen.protocols.last_segment_perplexity, ReRoPE's
protocol): each sequence is a context of L tokens plus one target, and only its final `segment`
targets are scored. The search (lengen.hf.search) runs on a *tune slice* of sequences; the chosen
setting is reported on a disjoint *evaluation slice*, beside plain RoPE and the method's documented
default on the same slice, so the reported number is not the one that was minimised.

Slices: every document of the text is cut into consecutive, non-overlapping sequences of L + 1
tokens (documents shorter than that are joined by EOS, as in lengen.data.long_sequences), long
documents' sequences first. The tune slice is the first `tune_docs` sequences; the evaluation slice
the next `eval_docs` sequences that share no document with the tune slice, or, when the text has
too few documents, other sequences of the same documents (never the same tokens; the output says
which documents are shared). `eval_text` takes the evaluation slice from another text instead:
that measures how far a setting tuned on one source carries to another.

Cache: OUT/tune_cache.json holds every scored sequence's NLL, written atomically after each one;
rerunning the same command resumes without scoring anything again (a longer --budget searches
further). Another model, length, segment, text or precision is refused for that folder."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from lengen import io
from lengen.data import load_documents
from lengen.data.batches import joined_short_documents
from lengen.data.sources import resolve_source
from lengen.devices import precision_context, resolve_device
from lengen.environment import run_environment
from lengen.errors import LengenError
from lengen.formats import count_noun
from lengen.hf.arch import inspect_model
from lengen.hf.identity import legacy_model, model_fingerprint
from lengen.hf.loading import (attention_hints, bos_prefix, corpus_encoder, load, load_reason, load_tokenizer,
                               read_config)
from lengen.hf.patch import extend, restore
from lengen.hf.scoring import greedy_fn, nll_fn, sequences_digest
from lengen.hf.search import DEFAULT_METHODS, SPACES, SearchResult, Setting, search, spaces_for
from lengen.hf.settings import EvalSettings
from lengen.progress import progress_bar
from lengen.protocols import passkey_accuracy, write_csv
from lengen.protocols.report import csv_disagreement
from lengen.protocols.fitting import check_prompts_fit

CACHE_VERSION = 1
# what a cached NLL depends on (besides the tokens, hashed): scores are reused only if all agree
SAME_SCORES = ("gguf_file", "length", "segment", "dtype", "attn", "train_length", "precision")


@dataclass
class TuneSettings:
    model_path: str
    length: int                       # target context length L
    text: str | None = None           # file, folder or glob; None: the standard library's sources
    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))
    budget: float = 60.0              # minutes of search (the evaluation slice comes after)
    eval_text: str | None = None      # the evaluation slice from another text
    tune_docs: int = 2                # sequences in the tune slice
    eval_docs: int = 2                # sequences in the evaluation slice
    segment: int | None = None        # scored final tokens (default L // 2)
    logn: bool = True                 # also try every setting with +logn
    margin: float = 0.5               # early stopping: nats worse than the best finished setting
    refine: bool = True
    passkey: int = 0                  # passkey prompts per finalist (0: perplexity only)
    seed: int = 0                     # passkey prompts: seed for choosing; seed + 1 for the report
    gguf_file: str | None = None
    dtype: str = "float32"
    attn: str = "sdpa"
    train_length: int | None = None   # default: the config's (original_)max_position_embeddings
    device: str = "auto"
    precision: str = "fp32"

    def segment_tokens(self) -> int:
        return max(1, self.length // 2) if self.segment is None else self.segment

    def eval_settings(self) -> EvalSettings:
        return EvalSettings(self.model_path, ["rope"], [self.length], protocol="last-segment",
                            gguf_file=self.gguf_file, corpus=self.text, docs=self.tune_docs,
                            segment=self.segment_tokens(), dtype=self.dtype, attn=self.attn,
                            train_length=self.train_length, device=self.device, precision=self.precision)

    def check(self) -> None:
        """Every check that needs no model weights (the config is read for L0)."""
        bad = [m for m in self.methods if m not in SPACES]
        if not self.methods or bad:
            raise LengenError(f"lengen hf tune searches the methods {', '.join(SPACES)}; "
                              + (f"got {bad[0]!r}" if bad else "give at least one"))
        if len(set(self.methods)) != len(self.methods):
            raise LengenError("a method is given twice in --methods")
        if not (isinstance(self.budget, (int, float)) and math.isfinite(self.budget) and self.budget > 0):
            raise LengenError(f"--budget must be > 0 minutes, got {self.budget}")
        if self.tune_docs < 1 or self.eval_docs < 1:
            raise LengenError("--tune-docs and --eval-docs must be >= 1")
        if not 1 <= self.segment_tokens() <= self.length:
            raise LengenError(f"--segment must be in 1..{self.length} (the length)")
        if self.passkey < 0 or self.seed < 0:
            raise LengenError("--passkey and --seed must be >= 0")
        if not self.margin > 0:
            raise LengenError(f"--margin must be > 0 nats, got {self.margin}")
        self.eval_settings().check()        # --train-length, dtype, attn, precision, model folder, --gguf-file
        for text in (self.text, self.eval_text):
            resolve_source(text)            # a missing text file fails here
        L0 = self.trained_length()
        if self.length <= L0:
            raise LengenError(f"--length {self.length} is not beyond the trained length {L0}: "
                              "there is nothing to extend (plain RoPE is the model as trained)")

    def trained_length(self) -> int:
        if self.train_length:
            return self.train_length
        config = read_config(self.model_path, self.gguf_file)
        return int(getattr(config, "original_max_position_embeddings", None) or config.max_position_embeddings)


# --- slices ---------------------------------------------------------------------------------------

@dataclass
class Piece:
    tokens: np.ndarray        # L + 1 token ids
    docs: tuple               # indices of the documents it comes from
    start: int                # offset of its first token in its first document


def pieces(docs: list[np.ndarray], need: int, eos: int) -> list[Piece]:
    """Every document cut into consecutive sequences of `need` tokens (the rest dropped); then the
    shorter documents joined by EOS, as lengen.data.long_sequences does, consecutive ones together."""
    out = [Piece(d[k * need:(k + 1) * need].astype(np.int64), (i,), k * need)
           for i, d in enumerate(docs) if len(d) >= need for k in range(len(d) // need)]
    return out + [Piece(tokens, indices, 0) for indices, tokens in joined_short_documents(docs, need, eos)]


def split_slices(tune_from: list[Piece], n_tune: int, n_eval: int,
                 eval_from: list[Piece] | None = None) -> tuple[list[Piece], list[Piece]]:
    """(tune slice, evaluation slice). Without `eval_from`: the first n_tune pieces, then n_eval of
    the others, those sharing no document with the tune slice first."""
    tune = tune_from[:n_tune]
    if eval_from is not None:
        return tune, eval_from[:n_eval]
    used = {d for p in tune for d in p.docs}
    rest = sorted(tune_from[n_tune:], key=lambda p: bool(used & set(p.docs)))   # stable: in order
    return tune, rest[:n_eval]


def _describe(p: Piece, names: list[str]) -> dict:
    return {"documents": [names[i] for i in p.docs], "start": p.start, "tokens": len(p.tokens)}


def _digest(slice_: list[Piece]) -> str:
    return sequences_digest([p.tokens for p in slice_])


def make_slices(settings: TuneSettings, tokenizer) -> tuple[list[Piece], list[Piece], dict]:
    need = settings.length + 1
    enc = corpus_encoder(tokenizer)
    prefix = np.array(bos_prefix(tokenizer), dtype=np.int64)   # as hf eval's sequences begin

    def cut(d) -> list[Piece]:
        out = pieces(d.docs, need - len(prefix), d.eos)
        for p in out:
            p.tokens = np.concatenate([prefix, p.tokens])
        return out

    docs = load_documents(settings.text, enc)
    own = cut(docs)
    other = None
    if settings.eval_text is not None:
        eval_docs = load_documents(settings.eval_text, enc)
        other = cut(eval_docs)
    tune, evaluation = split_slices(own, settings.tune_docs, settings.eval_docs, other)
    if len(tune) < settings.tune_docs or len(evaluation) < settings.eval_docs:
        raise LengenError(
            f"the text gives {len(own)} sequences of {need} tokens"
            + (f" and --eval-text {len(other)}" if other is not None else "")
            + f"; the tune slice needs {settings.tune_docs} and the evaluation slice {settings.eval_docs}: "
            "give more text, fewer --tune-docs / --eval-docs, or --eval-text")
    eval_names = eval_docs.names if other is not None else docs.names
    shared = [] if other is not None else sorted(
        {docs.names[d] for p in evaluation for d in p.docs} & {docs.names[d] for p in tune for d in p.docs})
    info = {"text": docs.source, "eval_text": eval_docs.source if other is not None else None,
            "tune_slice": [_describe(p, docs.names) for p in tune],
            "eval_slice": [_describe(p, eval_names) for p in evaluation],
            "shared_documents": shared, "tune_tokens": _digest(tune), "eval_tokens": _digest(evaluation)}
    return tune, evaluation, info


# --- cache ------------------------------------------------------------------------------------------

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


# --- the model as an objective ---------------------------------------------------------------------

class ModelObjective:
    """objective(setting, i) -> mean NLL of the final `segment` targets of sequences[i], the model
    extended with the setting's spec ("rope": as trained). The extension is kept between calls
    for the same spec. `get_model()` gives the model, loaded on first use: a run whose scores are
    all cached never loads it."""

    def __init__(self, get_model, sequences: list[Piece], segment: int, train_length: int,
                 precision: str, device: torch.device):
        self.get_model, self.sequences, self.segment = get_model, sequences, segment
        self.train_length, self.precision, self.device = train_length, precision, device
        self.nll = None
        self.current: str | None = None

    def use(self, spec: str) -> None:
        if spec == self.current:
            return
        self.close()
        if spec != "rope":
            extend(self.get_model(), spec, train_length=self.train_length)
        self.current = spec

    def __call__(self, setting: Setting | str, i: int) -> float:
        self.use(setting if isinstance(setting, str) else setting.spec)
        self.nll = self.nll or nll_fn(self.get_model())
        ids = torch.as_tensor(self.sequences[i].tokens)[None]
        with precision_context(self.precision, self.device):
            return float(self.nll(ids, self.segment).double().mean())

    def close(self) -> None:
        if self.current not in (None, "rope"):
            restore(self.get_model())
        self.current = None


# --- the whole command ------------------------------------------------------------------------------

def tune(settings: TuneSettings | None = None, *, out: str | Path = "runs/hf-tune", progress: bool = True,
         clock=time.monotonic, **kwargs) -> dict:
    """Search, report on the evaluation slice, write OUT/tune.json, tune.csv and tune_cache.json;
    returns the result (as in tune.json). Keyword arguments build the TuneSettings when none is given:
    lengen.hf.tune(model_path="./llama", length=16384, text="books/", budget=30)."""
    settings = settings or TuneSettings(**kwargs)
    settings.check()
    out = Path(out)
    io.check_writable(out)
    model_id = model_fingerprint(settings.model_path, settings.gguf_file)   # a damaged weight file fails here
    device = resolve_device(settings.device)
    L0 = settings.trained_length()
    segment = settings.segment_tokens()
    tokenizer = load_tokenizer(settings.eval_settings())
    tune_slice, eval_slice, slices = make_slices(settings, tokenizer)
    if settings.passkey:   # a length no passkey prompt fits is refused before the model loads
        check_prompts_fit("passkey", tokenizer.encode, [settings.length], (), settings.seed)
    key = cache_key(settings, L0, slices["tune_tokens"], model_id)
    cache = load_cache(out, key, settings.model_path)
    check_records(out, key)
    cache_path = out / "tune_cache.json"
    save = lambda *_: io.write_json(cache_path, cache)   # noqa: E731

    started = time.time()
    loaded = {}

    def get_model():
        if "model" not in loaded:   # on first use: a rerun with every score cached never loads it
            m = load(settings.eval_settings(), tokenizer)[0].to(device)
            inspect_model(m)        # an unsupported model fails now, not at its first setting
            for hint in attention_hints(m, settings.attn, settings.length, device, settings.precision):
                print(hint, file=sys.stderr)
            loaded["model"] = m
        return loaded["model"]

    objective = ModelObjective(get_model, tune_slice, segment, L0, settings.precision, device)
    bar = progress_bar(0, "hf tune", disable=not progress, unit="seq")
    try:
        result = search(spaces_for(settings.methods, L0, settings.length, settings.logn), objective,
                        len(tune_slice), settings.budget * 60, clock=clock, cache=cache["tune"],
                        on_score=save, margin=settings.margin, refine=settings.refine, progress=bar)
    finally:
        objective.close()
        bar.close()
    save()
    chosen = result.best(len(tune_slice))
    passkey = {}
    if chosen is not None and settings.passkey:
        chosen, passkey = _passkey_choice(get_model, tokenizer, result, len(tune_slice), settings, L0, device,
                                          cache, save)
    if chosen is None:
        raise LengenError(f"the budget ({settings.budget:g} min) ended before any setting was scored on "
                          f"all {len(tune_slice)} tune sequences; rerun with a larger --budget "
                          f"(the {cache_path} keeps what was scored)")
    default = spaces_for([chosen.setting.method], L0, settings.length, False)[0].defaults()[0]
    report = _evaluate(get_model, eval_slice, segment, L0, settings, device, cache, slices["eval_tokens"],
                       {"chosen": chosen.spec, "rope": "rope", "default": default.spec}, save, progress)
    if settings.passkey:   # other prompts than the ones the choice was made on
        for row in report:
            row["eval_passkey"] = _passkey_cached(get_model, tokenizer, row["spec"], settings, L0, device,
                                                  cache, settings.seed + 1, save)
    call = f'lengen.hf.extend(model, "{chosen.spec}"' + (
        f", train_length={settings.train_length})" if settings.train_length else ")")
    meta = {**asdict(settings), "train_length": L0, "segment": segment, **slices, "settings": key,
            "device": str(device), "environment": run_environment(device),
            "seconds": round(time.time() - started, 1),
            "out_of_budget": result.out_of_budget, "new_evaluations": result.calls,
            # the search's cost, this run and earlier ones into the same --out (cached seconds)
            "search_seconds": round(sum(sum(t.seconds) for t in result.trials), 1),
            "early_stopping": f"stopped when worse than the best finished setting by > {settings.margin} nats "
                              "of mean NLL on the sequences scored so far"}
    ranking = ranking_rows(result, len(tune_slice))
    if settings.passkey:
        for row in ranking:
            row["tune_passkey"] = passkey.get(row["spec"])
    output = {"meta": meta, "ranking": ranking, "chosen": chosen.spec,
              "tune_ppl": math.exp(chosen.mean), "evaluation": report,
              "no_better_than": no_better_than(report), "call": call}
    io.write_json(out / "tune.json", output)
    write_csv(out / "tune.csv", output["ranking"])
    return output


def _passkey_choice(get_model, tokenizer, result: SearchResult, n_items: int, settings: TuneSettings, L0: int,
                    device, cache: dict, save):
    """Optional passkey objective: each method's best finished setting (by tune perplexity) gets
    settings.passkey prompts (seed settings.seed); the choice is the highest accuracy, ties broken by
    tune perplexity. Returns (chosen trial, {spec: accuracy})."""
    finalists = sorted((b for m in settings.methods if (b := result.best(n_items, m)) is not None),
                       key=lambda t: t.mean)
    accuracy = {t.spec: _passkey_cached(get_model, tokenizer, t.spec, settings, L0, device, cache, settings.seed,
                                        save) for t in finalists}
    return max(finalists, key=lambda t: (accuracy[t.spec], -t.mean)), accuracy


def _passkey_cached(get_model, tokenizer, spec: str, settings: TuneSettings, L0: int, device, cache: dict,
                    seed: int, save) -> float:
    """Passkey accuracy of `spec` at settings.length on settings.passkey prompts of `seed` (cached)."""
    scores = cache.setdefault("passkey", {}).setdefault(f"seed={seed},trials={settings.passkey}", {})
    if spec not in scores:
        model = get_model()
        pad = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)
        if spec != "rope":
            extend(model, spec, train_length=L0)
        try:
            with precision_context(settings.precision, device):
                (point,) = passkey_accuracy(greedy_fn(model, pad), tokenizer.encode, tokenizer.decode,
                                            [settings.length], settings.passkey, seed)
        finally:
            if spec != "rope":
                restore(model)
        scores[spec] = point.accuracy
        save()
    return scores[spec]


def _evaluate(get_model, eval_slice, segment, L0, settings, device, cache, digest, specs: dict, save,
              progress: bool) -> list[dict]:
    """Each spec's last-segment perplexity on the evaluation slice (cached per slice digest)."""
    scores = cache["eval"].setdefault(digest, {})
    objective = ModelObjective(get_model, eval_slice, segment, L0, settings.precision, device)
    todo = sum(len(eval_slice) - len(scores.get(s, [])) for s in dict.fromkeys(specs.values()))
    bar = progress_bar(todo, "hf tune: evaluation slice", disable=not progress or not todo, unit="seq")
    try:
        for spec in dict.fromkeys(specs.values()):
            nll = scores.setdefault(spec, [])
            while len(nll) < len(eval_slice):
                bar.set_description(f"evaluation slice: {spec}")
                nll.append(objective(spec, len(nll)))
                save()
                bar.update(1)
    finally:
        objective.close()
        bar.close()
    return [{"role": role, "spec": spec, "eval_ppl": math.exp(sum(scores[spec]) / len(scores[spec])),
             "sequences": len(scores[spec])} for role, spec in specs.items()]


def no_better_than(evaluation: list[dict]) -> list[str]:
    """The roles ("rope", "default") the chosen setting does not beat on the evaluation slice: lower
    perplexity, or with passkey scores, higher accuracy (ties: lower perplexity). The default is
    left out when it is the chosen setting itself."""
    rows = {e["role"]: e for e in evaluation}
    chosen = rows["chosen"]

    def score(e):
        return (e.get("eval_passkey", 0), -e["eval_ppl"])

    return [role for role in ("rope", "default") if role in rows and rows[role]["spec"] != chosen["spec"]
            and not score(chosen) > score(rows[role])]


def ranking_rows(result: SearchResult, n_items: int) -> list[dict]:
    rows = [{"rank": i + 1, "spec": t.spec, "method": t.setting.method,
             "tune_ppl": math.exp(t.mean) if t.nll else None, "sequences": len(t.nll),
             "status": t.status(n_items), "default": t.default, "stage": t.stage}
            for i, t in enumerate(result.ranked(n_items))]
    return rows + [{"rank": None, "spec": s.spec, "method": s.method, "tune_ppl": None, "sequences": 0,
                    "status": "not run", "default": None, "stage": None} for s in result.not_run]


def evaluation_source(meta: dict) -> str:
    """Where a tune record's evaluation slice came from, in words."""
    if meta["eval_text"]:
        return f"--eval-text {meta['eval_text']}"
    return "the same text, other sequences" if meta["shared_documents"] else "the same text, other documents"


def format_result(output: dict) -> str:
    """The ranked table, the chosen setting against plain RoPE and the default on the evaluation
    slice, and the extend() call."""
    n = len(output["meta"]["tune_slice"])
    pk = output["meta"]["passkey"] > 0
    lines = ["| rank | spec | tune ppl | sequences | status | default |" + (" tune passkey |" if pk else ""),
             "|---|---|---|---|---|---|" + ("---|" if pk else "")]
    for r in output["ranking"]:
        ppl = "" if r["tune_ppl"] is None else f"{r['tune_ppl']:.4f}"
        acc = "" if r.get("tune_passkey") is None else f"{r['tune_passkey']:.2f}"
        lines.append(f"| {r['rank'] or ''} | {r['spec']} | {ppl} | {r['sequences']}/{n} | {r['status']} | "
                     f"{'yes' if r['default'] else ''} |" + (f" {acc} |" if pk else ""))
    meta = output["meta"]
    where = evaluation_source(meta)
    lines += ["", f"chosen: {output['chosen']} (tune ppl {output['tune_ppl']:.4f} on {count_noun(n, 'sequence')})",
              f"evaluation slice ({count_noun(len(meta['eval_slice']), 'sequence')}, {where}; last {meta['segment']} "
              f"tokens at length {meta['length']}):"]
    lines += [f"  {e['role']:8s} {e['spec']:40s} ppl {e['eval_ppl']:.4f}"
              + (f"  passkey {e['eval_passkey']:.2f}" if "eval_passkey" in e else "") for e in output["evaluation"]]
    worse = no_better_than(output["evaluation"])
    if worse:
        score = {e["role"]: f"ppl {e['eval_ppl']:.4f}" + (f", passkey {e['eval_passkey']:.2f}" if "eval_passkey" in e
                                                          else "") for e in output["evaluation"]}
        names = {"rope": "plain RoPE", "default": "the method's default"}
        lines.append(f"note: on the evaluation slice the chosen setting ({score['chosen']}) is no better than "
                     + " or ".join(f"{names[w]} ({score[w]})" for w in worse)
                     + ": its lead on the tune slice did not carry over")
    if meta["shared_documents"]:
        lines.append(f"note: the evaluation slice shares documents with the tune slice (other tokens): "
                     f"{', '.join(meta['shared_documents'])}")
    if meta["out_of_budget"]:
        lines.append(f"the budget ran out: rerun with a larger --budget to search further (scores are cached)")
    lines += ["", output["call"]]
    return "\n".join(lines)
