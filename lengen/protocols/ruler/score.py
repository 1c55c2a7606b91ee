"""Scoring the RULER-style tasks, accuracy per task and length, and their results files."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from lengen import io
from lengen.errors import LengenError
from lengen.protocols.report import pivot_table, plot_metric, write_csv
from lengen.protocols.ruler.tasks import TASKS, Encode, make_ruler_trials

GenerateFn = Callable[[list[int], int], list[int]]


def found(answer: str, generated: str) -> bool:
    """The answer appears in the generated text as a whole word (case-insensitive; letters, digits,
    "-" and "_" continue a word), so 1234567 is not found in 12345678 nor "apple" in "misty-apple"."""
    return re.search(r"(?<![\w-])" + re.escape(answer) + r"(?![\w-])", generated, re.IGNORECASE) is not None


def score(answers: Sequence[str], generated: str) -> float:
    """RULER's string-match-all, at word boundaries: the fraction of the expected answers found."""
    return sum(found(a, generated) for a in answers) / len(answers)


@dataclass
class RulerPoint:
    task: str
    length: int
    accuracy: float            # mean over trials of the fraction of answers found
    correct: int               # trials with every answer found
    trials: int
    mean_prompt_tokens: float

    def row(self) -> dict:
        d = asdict(self)
        return {"task": d.pop("task"), **d}


def check_tasks(tasks: Sequence[str] | None) -> list[str]:
    """The tasks to run (all when None or empty), unknown names refused."""
    tasks = list(tasks or TASKS)
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise LengenError(f"unknown ruler task {unknown[0]!r}; valid: {', '.join(TASKS)}")
    return list(dict.fromkeys(tasks))


def ruler_accuracy(generate_fn: GenerateFn, encode: Encode, decode: Callable[[list[int]], str],
                   lengths: Sequence[int], tasks: Sequence[str] | None = None, trials: int = 20,
                   seed: int = 0, progress=None, records: list | None = None) -> list[RulerPoint]:
    """Accuracy of every task at every length (task-major). `records`, when given, receives one
    dict per trial (task, length, answers, generated text, score)."""
    if trials < 1:
        raise LengenError(f"ruler trials must be >= 1, got {trials}")
    points = []
    for task in check_tasks(tasks):
        for L in lengths:
            total, correct, sizes = 0.0, 0, []
            for t in make_ruler_trials(task, encode, L, trials, seed):
                text = decode(generate_fn(t.prompt_ids, t.max_new_tokens))
                s = score(t.answers, text)
                total += s
                correct += s == 1.0
                sizes.append(len(t.prompt_ids))
                if records is not None:
                    records.append({"task": task, "length": L, "answers": t.answers, "generated": text,
                                    "score": s, "prompt_tokens": len(t.prompt_ids),
                                    "max_new_tokens": t.max_new_tokens})
            points.append(RulerPoint(task, L, total / trials, correct, trials, float(np.mean(sizes))))
            if progress is not None:
                progress.update(1)
    return points


# -- results --------------------------------------------------------------------------------------

MEAN = "mean"   # the task name of the per-method average rows in the table and the plot


def task_means(rows: list[dict]) -> list[dict]:
    """Per method and length, the mean accuracy over the tasks measured there (a task whose prompt
    does not fit a length is left out there; which tasks fit depends only on the tokenizer, so
    every method averages the same ones)."""
    out = []
    for m in dict.fromkeys(r["method"] for r in rows):
        for L in sorted({r["length"] for r in rows if r["method"] == m}):
            vals = [r["accuracy"] for r in rows if r["method"] == m and r["length"] == L
                    and r.get("accuracy") is not None and not math.isnan(r["accuracy"])]
            out.append({"method": m, "length": L, "accuracy": float(np.mean(vals)) if vals else math.nan})
    return out


def ruler_table(rows: list[dict]) -> str:
    """Markdown: one row per method and task, then one per method with the mean over tasks;
    lengths as columns."""
    labelled = [{**r, "method": f"{r['method']} / {r['task']}"} for r in rows]
    labelled += [{**r, "method": f"{r['method']} / {MEAN}"} for r in task_means(rows)]
    return pivot_table(labelled, "accuracy", "{:.2f}")


def write_ruler_results(out_dir: Path, rows: list[dict], meta: dict, train_length: int | None,
                        title: str = "", plot_name: str = "ruler_vs_length.png",
                        csv_rows: list[dict] | None = None) -> str:
    """results.csv (one row per method, task and length), results.json, and a plot of the mean
    accuracy over tasks against length, one line per method; returns the markdown table."""
    out_dir = Path(out_dir)
    write_csv(out_dir / "results.csv", csv_rows if csv_rows is not None else rows)
    table = ruler_table(rows)
    clean = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]
    io.write_json(out_dir / "results.json", {**meta, "metric": "accuracy", "rows": clean, "table": table,
                                             "means": task_means(rows)})
    means = [r for r in task_means(rows) if not math.isnan(r["accuracy"])]
    plot_metric(means, "accuracy", train_length, out_dir / plot_name,
                (title + ": " if title else "") + "mean accuracy over tasks", log_y=False)
    return table
