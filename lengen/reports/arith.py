"""The report of an arithmetic sweep (`command: arith`; docs/arithmetic.md): per variant (the
encoding, the positions and every other option that varies between runs, the seed left out), the
exact-match heat map over the task's cells (mean over seeds), accuracy against length (the
diagonal (n, n) of a two-operand task) and the in- and out-of-distribution means, each a mean over
seeds with n, the sample std (ddof 1) and the 95% t interval (lengen.reports.stats), beside what
the papers report at their scale."""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pandas as pd

from lengen import io
from lengen.arith.plots import close, heatmap_figure, length_figure
from lengen.reports import page
from lengen.reports.load import SweepData
from lengen.reports.stats import summarize

#: columns of `runs` that are never part of a variant
NOT_VARIANT = {"run_id", "seed", "done", "train_loss", "in_distribution", "out_of_distribution", "accuracy",
               "parameters", "seconds", "train_seconds", "eval_seconds", "device", "variant"}
#: the papers' headline numbers at their scale, from their abstracts (their bodies give the
#: protocols, docs/arithmetic.md)
PUBLISHED = [
    ("McLeish et al. 2024 (Abacus), arXiv 2405.17399, abstract",
     "trained on numbers of up to 20 digits (one GPU, one day): up to 99% exact match on 100-digit addition"),
    ("Cho et al. 2024 (position coupling), arXiv 2405.20671, abstract",
     "trained on 1 to 30-digit additions: generalizes up to 200-digit additions (6.67x the trained length)"),
]
STYLE = page.style("td:first-child,th:first-child{text-align:left}")


def add_variants(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with `variant`: 'pe / positions', then every other option that varies (name=value)."""
    runs = runs.copy()
    others = [c for c in runs.columns if c not in NOT_VARIANT | {"pe", "positions"}
              and runs[c].astype(str).nunique(dropna=False) > 1]
    runs["variant"] = [" / ".join([str(r["pe"]), str(r["positions"])])
                       + "".join(f", {c}={r[c]}" for c in others) for _, r in runs.iterrows()]
    return runs


def run_lengths(data: SweepData, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per finished run and length: the exact match pooled over the cells the run's task
    counts for that length (Task.length_of)."""
    length_of = {rid: cfg.build_task().length_of for rid, cfg in zip(data.runs["run_id"], data.configs)}
    rows = []
    for rid, group in data.values.groupby("run_id", sort=False):
        pooled: dict[int, list[int]] = {}
        for _, v in group.iterrows():
            n = length_of[rid]((int(v["length"]), int(v["j"])))
            if n is not None:
                hit = pooled.setdefault(n, [0, 0])
                hit[0] += int(v["correct"])
                hit[1] += int(v["total"])
        rows += [{"run_id": rid, "length": n, "accuracy": c / t} for n, (c, t) in sorted(pooled.items())]
    frame = pd.DataFrame(rows, columns=["run_id", "length", "accuracy"])
    return frame.merge(runs[["run_id", "variant"]], on="run_id")


def _summaries(frame: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """n, mean, std, low, high of `value` (in %) over the seeds of each `keys` group."""
    out = []
    for key, group in frame.groupby(keys, sort=False):
        s = summarize(100 * group[value].astype(float))
        out.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,))), "n": s.n, "mean": s.mean,
                    "std": s.std, "low": s.low, "high": s.high})
    return pd.DataFrame(out, columns=[*keys, "n", "mean", "std", "low", "high"])


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def _pm(row) -> str:
    if row["n"] == 0 or np.isnan(row["mean"]):
        return "–"
    if row["n"] < 2:
        return f"{row['mean']:.1f} (n=1)"
    return f"{row['mean']:.1f} ± {row['std']:.1f} {_interval(row)} (n={row['n']})"


def _interval(row) -> str:
    """The 95% t interval clipped to 0-100: exact match is a percentage."""
    return f"[{max(row['low'], 0):.1f}, {min(row['high'], 100):.1f}]"


def build(data: SweepData, out: Path) -> dict:
    """Write arith_table.md/.csv (in- and out-of-distribution per variant), arith_by_length.csv and
    arith_by_length.md (the lengths past the training digits), arith_cells.csv (every cell's mean
    over seeds), heatmap-VARIANT.png per variant, accuracy_vs_length.png and index.html into `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = add_variants(data.runs)
    done_mask = runs["done"].fillna(False).astype(bool)
    finished = runs[done_mask]
    table = pd.concat([_summaries(finished, ["variant"], m).assign(metric=m)
                       for m in ("in_distribution", "out_of_distribution")]) if len(finished) else pd.DataFrame()
    values = data.values.merge(runs[["run_id", "variant"]], on="run_id")
    cells = _summaries(values, ["variant", "length", "j"], "accuracy") if len(values) else pd.DataFrame()
    lengths = run_lengths(data, runs) if len(values) else pd.DataFrame()
    by_length = _summaries(lengths, ["variant", "length"], "accuracy") if len(lengths) else pd.DataFrame()
    md = _markdown(table, len(finished), len(runs))
    io.write_text(out / "arith_table.md", md)
    io.write_text(out / "arith_table.csv", table.to_csv(index=False, float_format="%.10g"))
    io.write_text(out / "arith_by_length.csv", by_length.to_csv(index=False, float_format="%.10g"))
    train_digits = int(finished["train_digits"].max()) if len(finished) else 0
    io.write_text(out / "arith_by_length.md", _length_markdown(by_length, train_digits))
    io.write_text(out / "arith_cells.csv", cells.to_csv(index=False, float_format="%.10g"))
    figures = []
    axes = tuple(data.configs[0].build_task().cell_axes) if data.configs else ("i", "j")
    for variant, group in (cells.groupby("variant", sort=False) if len(cells) else ()):
        name = f"heatmap-{_slug(variant)}.png"
        fig = heatmap_figure({(int(r["length"]), int(r["j"])): r["mean"] / 100 for _, r in group.iterrows()}, axes,
                             train_digits, f"{data.name}: {variant} (mean over {int(group['n'].max())} seeds)")
        io.save_figure(out / name, fig)
        close(fig)
        figures.append((variant, name))
    curve = None
    if len(by_length):
        curves = {v: (g["length"].to_numpy(), g["mean"].to_numpy(), g["low"].to_numpy(), g["high"].to_numpy())
                  for v, g in by_length.groupby("variant", sort=False)}
        curve = "accuracy_vs_length.png"
        fig = length_figure(curves, train_digits, f"{data.name}: exact match against length")
        io.save_figure(out / curve, fig)
        close(fig)
    io.write_text(out / "index.html", _html(data, md, figures, curve, len(finished), len(runs), out))
    return {"out": out, "done": len(finished), "planned": len(runs), "markdown": md, "table": table,
            "by_length": by_length, "cells": cells, "figures": [f for _, f in figures], "curve": curve}


def _markdown(table: pd.DataFrame, done: int, planned: int) -> str:
    head = ("Table: exact match (%) in distribution (every operand within the training digits) and out of it, "
            "mean ± sample std (ddof 1) [95% t interval, clipped to 0-100] (n seeds).\n\n")
    if not len(table):
        return head + f"No run has finished yet ({done} of {planned}).\n"
    lines = ["| variant | in distribution | out of distribution |", "|---|---|---|"]
    for variant, group in table.groupby("variant", sort=False):
        by = {r["metric"]: _pm(r) for _, r in group.iterrows()}
        lines.append(f"| {variant} | {by['in_distribution']} | {by['out_of_distribution']} |")
    published = "\n".join(f"- {who}: {what}" for who, what in PUBLISHED)
    return head + "\n".join(lines) + "\n\nWhat the papers report at their scale:\n\n" + published + "\n"


def _length_markdown(by_length: pd.DataFrame, train_digits: int) -> str:
    """Exact match per variant at each length past the training digits: mean [95% t interval]."""
    head = (f"Table: exact match (%) against length past the training digits (1-{train_digits}), "
            "mean over seeds [95% t interval, clipped to 0-100] (n seeds); a length is the diagonal "
            "cell (n, n) of a two-operand task.\n\n")
    past = by_length[by_length["length"] > train_digits] if len(by_length) else by_length
    if not len(past):
        return head + "No length past the training digits has been evaluated yet.\n"
    lengths = sorted(int(n) for n in past["length"].unique())
    lines = ["| variant | n | " + " | ".join(str(n) for n in lengths) + " |", "|---|---|" + "---|" * len(lengths)]
    for variant, group in past.groupby("variant", sort=False):
        by = {int(r["length"]): r for _, r in group.iterrows()}
        cells = [("–" if n not in by else f"{by[n]['mean']:.1f}" if by[n]["n"] < 2
                  else f"{by[n]['mean']:.1f} {_interval(by[n])}") for n in lengths]
        lines.append(f"| {variant} | {int(group['n'].max())} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def _html(data, md, figures, curve, done, planned, out) -> str:
    esc = html.escape
    parts = page.opening(data.name, done, planned, "Report folder", out)
    parts += ["<h2>Exact match in and out of distribution</h2>", f"<pre>{esc(md)}</pre>"]
    if curve:
        parts += ["<h2>Exact match against length</h2>",
                  f'<figure><img src="{esc(curve)}" alt="{esc(curve)}"><figcaption>Mean over seeds, the band the '
                  "95% t interval; dashed: the training digits.</figcaption></figure>"]
    for variant, name in figures:
        parts += [f"<h3>{esc(variant)}</h3>", f'<figure><img src="{esc(name)}" alt="{esc(name)}"></figure>']
    return page.document(data.name, parts, STYLE, data.spec_text)


def summary(rep: dict) -> list[str]:
    """What `lengen report` prints: how many runs finished, the table."""
    return [f"{rep['done']} of {rep['planned']} runs finished", rep["markdown"]]
