"""`lengen hf eval`'s engine: load a local Hugging Face model (lengen.hf.loading), apply each
method in turn and run one protocol of lengen.protocols at every length (the model scored by
lengen.hf.scoring), on sequences from lengen.data (the corpus tokenized with the model's
tokenizer); reuse the rows of an earlier run in the same folder once its settings, BOS and token
sequences agree; write and read back OUT/results.json, results.csv and plot.png.

Device and precision: the model is loaded on the CPU in settings.dtype (its weights' storage
type), moved to settings.device, and every forward pass runs in settings.precision: "bf16"
autocasts the matmuls of float32 (or bfloat16) weights to bfloat16; "tf32" lets CUDA run float32
matmuls in TensorFloat-32."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from lengen import io
from lengen.data import stdlib_root
from lengen.devices import precision_context, resolve_device
from lengen.environment import run_environment
from lengen.errors import LengenError
from lengen.extrapolation import is_plain
from lengen.hf.arch import inspect_model
from lengen.hf.calibration import CalibrationText
from lengen.hf.identity import legacy_model, model_fingerprint
from lengen.hf.loading import attention_hints, bos_prefix, load, load_reason, load_tokenizer
from lengen.hf.patch import extend, restore
from lengen.hf.scoring import greedy_fn, nll_fn, sequences, sequences_digest
from lengen.hf.settings import METRIC, EvalSettings
from lengen.progress import progress_bar
from lengen.protocols import (last_segment_perplexity, passkey_accuracy, perplexity_vs_length, pivot_table,
                              plot_metric, ruler_accuracy, write_csv)
from lengen.protocols.fitting import check_prompts_fit
from lengen.protocols.options import USED_BY
from lengen.protocols.report import csv_disagreement
from lengen.protocols.ruler import ruler_table, task_means

# rows of earlier protocol code (a length of L tokens scored L - 1 targets, other documents and
# passkey prompts) are not comparable: resuming them is refused
PROTOCOLS_VERSION = "lengen.protocols"   # the method name that means: the model as trained
RULER_COLUMNS = ("method", "task", "length", "accuracy", "correct", "trials", "mean_prompt_tokens", "note")


# settings that change what a (method, length) row means: rows are reused only if they agree
# (device is not one: a row measured on the CPU and on a GPU agree within rounding)
# (the corpus is not one: rows follow the token sequences they were scored on, sequences_digest)
SAME_RESULTS = ("gguf_file", "protocol", "docs", "segment", "trials", "seed",
                "tasks", "dtype", "attn", "train_length", "precision")


def run(settings: EvalSettings, progress: bool = True, previous: dict | None = None,
        on_row=None, on_resume=None) -> dict:
    """Evaluate every method at every length; returns {"meta": ..., "rows": [...]}.

    `previous` (an earlier result of the same settings, e.g. an interrupted run) supplies rows
    that are not computed again; its other rows are kept. `on_resume(n)` is called once its n rows
    have passed every check (settings, BOS, the sequences' digest), before the model loads;
    `on_row(result)` after each new row, so a caller can save progress."""
    settings.check()
    device = resolve_device(settings.device)  # a missing GPU fails before the model is loaded
    # the tokenizer first: what it refuses, and what it says about the rows, before the model loads
    tokenizer = load_tokenizer(settings)
    key = comparable(settings)   # reads the weights once: a damaged file is refused here
    if previous is not None:
        old = {"precision": "fp32", **(previous["meta"].get("settings") or {})}  # older results: fp32
        old = legacy_model(old, key, settings.model_path)
        if any(old.get(k) != v for k, v in key.items()):
            raise LengenError(f"the output folder holds results of other settings "
                              f"({_difference(old, key)}); use another --out")
    rows = list(previous["rows"]) if previous else []
    done = {(r["method"], r["length"]) for r in rows}
    # length-major: an interrupted run has every method at the shorter lengths
    todo = [(m, n) for n in settings.lengths for m in settings.methods if (m, n) not in done]
    seq_tokens = _sequence_tokens(settings, previous)
    started = time.time()
    if settings.protocol in ("passkey", "ruler") and todo:
        # lengths where no prompt fits the tokenizer
        check_prompts_fit(settings.protocol, tokenizer.encode, sorted({n for _, n in todo}),
                          settings.tasks or (), settings.seed)
    prefix = None   # perplexity: the BOS its sequences begin with (bos_prefix)
    if settings.protocol in ("ppl", "last-segment"):
        prefix = bos_prefix(tokenizer)
        before = (previous or {}).get("meta", {}).get("sequence_prefix", [])   # older results: none
        if rows and before != prefix:
            raise LengenError(f"the results in this output folder were scored on sequences beginning "
                              f"with {before or 'no BOS'}, this tokenizer's begin with {prefix or 'no BOS'} "
                              "(lengen before 2026-11-28 never added it): use another --out")
    seqs, digest = None, None   # perplexity: built before the model loads
    # rows to reuse are checked against this corpus's sequences even when nothing is left to score:
    # they are printed and relabelled with this corpus
    if seq_tokens and (todo or rows):
        seqs, digest = _checked_sequences(settings, tokenizer, seq_tokens, previous)
    if rows and on_resume is not None:
        on_resume(len(rows))
    model, tokenizer = load(settings, tokenizer)
    model.to(device)
    if any(not is_plain(m) for m in settings.methods):
        inspect_model(model)   # an unsupported model fails now, not after the first method
    for hint in attention_hints(model, settings.attn, max(n for _, n in todo) if todo else 0, device,
                                settings.precision):
        print(hint, file=sys.stderr)
    train_length = settings.train_length or int(model.config.max_position_embeddings)
    import transformers   # optional, imported on use; loaded by now, for its version

    meta = {**asdict(settings), "settings": key, "metric": METRIC[settings.protocol],
            "train_length": train_length, "model_type": model.config.model_type,
            "segment": settings.segment_tokens() if settings.protocol == "last-segment" else None,
            "corpus": settings.corpus or str(stdlib_root()), "sequence_tokens": seq_tokens,
            "sequence_prefix": prefix,
            "sequences_digest": digest,
            "device": str(device), "transformers": transformers.__version__,
            "environment": run_environment(device)}
    meta.pop("methods"), meta.pop("lengths")
    result = {"meta": meta, "rows": rows}
    bar = progress_bar(len(todo), "hf eval", disable=not progress or not todo, unit="length")
    for method, length in todo:
        bar.set_description(f"{method} @ {length}")
        if not is_plain(method):
            # calibrated methods (dpe, dope) read the run's corpus with the run's tokenizer
            extend(model, method, train_length=train_length,
                   calibration=CalibrationText(tokenizer, settings.corpus))
        try:
            t0 = time.time()
            answers: list[dict] = []   # passkey: each prompt's key and generated text
            with precision_context(settings.precision, device):
                if settings.protocol == "ruler":
                    task_rows = _ruler_rows(settings, model, tokenizer, length, bar)
                else:
                    value = _score(settings, model, tokenizer, seqs, length, bar, answers, prefix or [])
        finally:
            if not is_plain(method):
                restore(model)
        if settings.protocol == "ruler":   # one row per task, all of a (method, length) at once
            seconds = round(time.time() - t0, 1)
            rows += [{"method": method, **r, "seconds": seconds} for r in task_rows]
        else:
            rows.append({"method": method, "length": length, meta["metric"]: value,
                         "seconds": round(time.time() - t0, 1), **({"answers": answers} if answers else {})})
        if on_row is not None:
            on_row(result)
    bar.close()
    # the methods asked for first, in that order, then earlier rows' other methods
    order = {m: i for i, m in enumerate(dict.fromkeys([*settings.methods, *(r["method"] for r in rows)]))}
    rows.sort(key=lambda r: (order[r["method"]], r["length"]))
    meta["seconds"] = round(time.time() - started, 1)
    return result


def comparable(settings: EvalSettings) -> dict:
    """The settings a row depends on: those the protocol uses (lengen.protocols.options.USED_BY)."""
    unused = {k for k, protocols in USED_BY.items() if settings.protocol not in protocols}
    out = {k: getattr(settings, k) for k in SAME_RESULTS if k not in unused}
    out["model"] = model_fingerprint(settings.model_path, settings.gguf_file)
    if "segment" in out:
        out["segment"] = settings.segment_tokens() if settings.protocol == "last-segment" else None
    out["protocols"] = PROTOCOLS_VERSION
    return out


def _sequence_tokens(settings: EvalSettings, previous: dict | None) -> int | None:
    """Tokens per corpus sequence (None for passkey): max(lengths) + 1, or what the rows being
    resumed were measured on. Longer sequences would come from other documents (and move the
    last segment), so a length beyond the earlier ones is refused rather than silently mixed."""
    if settings.protocol in ("passkey", "ruler"):
        return None
    need = max(settings.lengths) + 1
    before = (previous or {}).get("meta", {}).get("sequence_tokens")
    if before is None or not previous.get("rows"):
        return need
    if need > before:
        raise LengenError(f"the results in this output folder were measured on sequences of {before} "
                          f"tokens (lengths up to {before - 1}); length {need - 1} needs longer "
                          "sequences, which changes the documents and targets: use another --out")
    return before


def _checked_sequences(settings: EvalSettings, tokenizer, need: int,
                       previous: dict | None) -> tuple[list[np.ndarray], str]:
    """The corpus sequences and their digest, refused if the rows being resumed were scored on
    others: another corpus, another Python's standard library, another tokenization. A copy of
    the same text at another path is the same sequences."""
    seqs = sequences(settings, tokenizer, need)
    digest = sequences_digest(seqs)
    if not previous or not previous.get("rows"):
        return seqs, digest
    before = previous["meta"].get("sequences_digest")
    if before is None:   # results written before 2026-11-28 name the corpus by the path given
        old = (previous["meta"].get("settings") or {}).get("corpus")
        if old != settings.corpus:
            raise LengenError(f"the output folder holds results of other settings (corpus: {old!r} there, "
                              f"{settings.corpus!r} now); use another --out")
    elif before != digest:
        raise LengenError("the results in this output folder were scored on other token sequences (another "
                          "corpus, another Python's standard library or another tokenization); use another --out")
    return seqs, digest


def _difference(old: dict, new: dict) -> str:
    return ", ".join(f"{k}: {old.get(k)!r} there, {v!r} now" for k, v in new.items()
                     if old.get(k) != v)


def _score(settings: EvalSettings, model, tokenizer, seqs, length: int, progress,
           answers: list | None = None, prefix: list[int] = ()) -> float:
    """One row's value; `prefix`: the BOS the sequences begin with (bos_prefix), kept in every window."""
    if settings.protocol == "ppl":
        return perplexity_vs_length(nll_fn(model), seqs, [length], progress=progress)[0].ppl
    if settings.protocol == "last-segment":
        return last_segment_perplexity(nll_fn(model), seqs, [length], settings.segment_tokens(),
                                       progress=progress, prefix=prefix)[0].ppl
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return passkey_accuracy(greedy_fn(model, pad if pad is not None else 0), tokenizer.encode,
                            tokenizer.decode, [length], settings.trials, settings.seed,
                            progress=progress, records=answers)[0].accuracy


def _ruler_rows(settings: EvalSettings, model, tokenizer, length: int, progress) -> list[dict]:
    """One row per task at this length (task, length, accuracy, correct, trials, mean_prompt_tokens,
    note, answers); a task whose prompt does not fit the length is a row with accuracy None and a note."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    generate = greedy_fn(model, pad if pad is not None else 0)
    out = []
    for task in settings.tasks:
        records: list[dict] = []
        try:
            (point,) = ruler_accuracy(generate, tokenizer.encode, tokenizer.decode, [length], [task],
                                      settings.trials, settings.seed, records=records)
            row = {**point.row(), "note": ""}
        except LengenError as e:
            row = {"task": task, "length": length, "accuracy": None, "correct": None,
                   "trials": settings.trials, "mean_prompt_tokens": None, "note": str(e)}
        out.append({**row, "answers": records})
    if progress is not None:
        progress.update(1)
    return out


# --- results: OUT/results.csv, results.json, plot.png -------------------------------------------

def result_table(result: dict) -> str:
    """Methods as rows, lengths as columns."""
    metric = result["meta"]["metric"]
    if result["meta"]["protocol"] == "ruler":
        return ruler_table(result["rows"])
    return pivot_table(result["rows"], metric, "{:.2f}" if metric == "accuracy" else "{:.3f}")


def save_result(result: dict, out: Path, plot_too: bool = True) -> list[Path]:
    """results.csv (method,length,METRIC), results.json ({"meta", "rows"}) and, with plot_too,
    plot.png (the trained length marked)."""
    out = Path(out)
    paths = [out / "results.csv", out / "results.json"]
    io.write_json(paths[1], result)   # the record first: a CSV is never ahead of it
    write_csv(paths[0], csv_rows(result))
    if plot_too:
        paths.append(plot_result(result, out / "plot.png"))
    return paths


def plot_result(result: dict, path: Path) -> Path:
    """The metric against length, a line per method (RULER: the mean over tasks), the trained
    length marked; log scale for perplexity."""
    meta, rows = result["meta"], result["rows"]
    metric = meta["metric"]
    name = Path(meta["gguf_file"]).stem if meta.get("gguf_file") else Path(meta["model_path"]).name
    title = f"{name}: {meta['protocol']}" + (
        f" (last {meta['segment']} tokens)" if meta["protocol"] == "last-segment" else "")
    if meta["protocol"] == "ruler":   # one line per method: the mean accuracy over tasks
        rows, title = task_means(rows), f"{title}, mean accuracy over tasks"
    finite = [r for r in rows if r[metric] is not None and math.isfinite(r[metric])]
    plot_metric(finite, metric, meta["train_length"], path, title, log_y=metric != "accuracy")
    return path


def csv_rows(result: dict) -> list[dict]:
    """results.csv's rows: method,length,METRIC (ruler: RULER_COLUMNS)."""
    if result["meta"]["protocol"] == "ruler":
        return [{k: r.get(k) for k in RULER_COLUMNS} for r in result["rows"]]
    metric = result["meta"]["metric"]
    return [{"method": r["method"], "length": r["length"], metric: r[metric]} for r in result["rows"]]


def load_result(out: Path) -> dict | None:
    """An earlier result in `out`, or None where there is none. A results.json that is not a
    whole record (damaged, truncated, another file) or a results.csv without its results.json
    is refused (LengenError): its rows could not be checked, and starting over would drop them.
    A results.csv that disagrees with results.json is named on stderr; the caller writes it again."""
    path, table = Path(out) / "results.json", Path(out) / "results.csv"
    if not path.is_file():
        if table.is_file() and table.stat().st_size:
            raise LengenError(f"{table} holds results but {path.name}, which says what they were measured on, "
                              f"is missing: restore it, or use another --out (delete {table.name} to start over)")
        return None
    try:
        result = io.read_json(path)
        problem = _record_problem(result)
    except (ValueError, OSError) as e:
        problem = f"not JSON: {load_reason(e)}"
    if problem:
        raise LengenError(f"{path} is damaged ({problem}); its rows cannot be checked against these settings: "
                          "restore it, or use another --out (or move this folder away to start over)")
    disagreement = csv_disagreement(table, csv_rows(result))
    if disagreement:
        print(f"note: {table} disagrees with {path.name} ({disagreement}); it is written again from "
              f"{path.name}", file=sys.stderr)
    return result


def _record_problem(result) -> str | None:
    """What makes `result` not a whole hf eval record ({"meta", "rows"}), in words; None if it is one."""
    if not isinstance(result, dict) or not isinstance(result.get("meta"), dict) \
            or not isinstance(result.get("rows"), list):
        return "not a lengen hf eval record"
    meta = result["meta"]
    if meta.get("protocol") not in METRIC or meta.get("metric") != METRIC[meta["protocol"]] \
            or not isinstance(meta.get("settings"), dict):
        return "its meta is incomplete"
    metric = meta["metric"]
    for i, row in enumerate(result["rows"]):
        value = row.get(metric, False) if isinstance(row, dict) else False
        if not (isinstance(row, dict) and isinstance(row.get("method"), str)
                and type(row.get("length")) is int and row["length"] >= 1
                and (value is None or type(value) in (int, float))
                and (meta["protocol"] != "ruler" or isinstance(row.get("task"), str))):
            return f"row {i + 1} is not a result row"
        if value is None and meta["protocol"] != "ruler":
            return f"row {i + 1} has no {metric}"
    return None
