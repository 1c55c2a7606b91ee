"""The report of a masked-LM sweep (`command: mlm`): the table of docs/results/su2023-mlm.md (Su's
experiment, its protocol in docs/mlm.md) from the sweep's runs, as Markdown, a long CSV, a figure and one
offline HTML page.

Rows: a *variant* (the training positions and every other option that varies between runs of the
same positions, the seed left out: `equal_mean, distribution=beta, ...`, labelled
as lengen.reports.lm_aggregate labels encodings), then each test-position mode it was evaluated at,
then log-n off and on; the unigram baseline last (every run's, pooled). Columns: masked-token
accuracy at each length, bits per byte at each length, and the accuracy over the second half of
the longest windows. A cell is the mean ± sample std (ddof 1) over the variant's seeds, with n; the
CSV adds the 95% t interval (lengen.reports.stats) for every metric `lengen mlm eval` measures.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from lengen import io
from lengen.reports import lm_aggregate, page
from lengen.reports.figures import metric_against_length
from lengen.reports.load import SweepData
from lengen.reports.render import MISSING, html_rows, markdown_rows, md_escape
from lengen.reports.stats import summarize

#: what `lengen mlm eval` measures per row (lengen.sweeps.kinds.mlm.EVAL_COLUMNS)
METRICS = ("accuracy", "bpb", "nll", "acc_first", "acc_last_half")
#: columns of `runs` that are never part of a variant
NOT_VARIANT = {"run_id", "seed", "done", "train_loss", "val_accuracy", "val_bpb", "unigram_accuracy", "unigram_bpb",
               "parameters", "seconds", "train_seconds", "eval_seconds", "device", "variant"}
UNIGRAM = "unigram"
#: a table row: (variant, test positions, log-n)
ROW_KEYS = ["variant", "test_positions", "log_n"]
CSV_COLUMNS = [*ROW_KEYS, "length", "metric", "n", "mean", "std", "low", "high", "planned"]

STYLE = page.style("td:nth-child(-n+3),th:nth-child(-n+3){text-align:left}")


def add_variants(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with `variant`: its training positions and the options that vary between runs of
    the same positions (NaN ones left out)."""
    runs = runs.copy()
    cols = lm_aggregate.option_columns(runs, by="positions", skip=NOT_VARIANT)
    runs["variant"] = [lm_aggregate.variant_label(r["positions"], None, {c: r[c] for c in cols},
                                                  labels=lm_aggregate.POSITION_LABELS)
                       for _, r in runs.iterrows()]
    return runs


def long_values(runs: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:
    """The finished runs' values (the sweep's mlm_by_length table) with variant and seed, the
    unigram rows under variant "unigram"; test_positions as text ("" for unigram) and log_n as a
    bool, whether read from run directories or from an export's CSV."""
    runs = add_variants(runs)
    v = values.merge(runs[["run_id", "variant", "seed"]], on="run_id", how="inner")
    v["test_positions"] = v["test_positions"].fillna("").astype(str)
    v["log_n"] = v["log_n"].astype(str).str.lower().isin(["true", "1", "1.0"])
    v.loc[v["method"] == UNIGRAM, "variant"] = UNIGRAM
    v["length"] = v["length"].astype(int)
    for m in METRICS:
        v[m] = pd.to_numeric(v[m], errors="coerce").astype(float)
    return v


def cells(runs: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:
    """One row per table row, length and metric, in table order: variant, test_positions, log_n,
    length, metric, n, mean, std (ddof 1), low, high (the 95% t interval), planned (runs of the
    variant). A variant with no finished run has one row of NaN (test positions "", n 0)."""
    runs = add_variants(runs)
    lv = long_values(runs, values)
    planned = runs.groupby("variant", sort=False).size()
    variant_order = {v: i for i, v in enumerate(planned.index)}
    variant_order[UNIGRAM] = len(variant_order)
    planned[UNIGRAM] = len(runs)
    mode_order = {m: i for i, m in enumerate(dict.fromkeys(lv["test_positions"]))}
    keys = sorted(set(map(tuple, lv[ROW_KEYS].itertuples(index=False))),
                  key=lambda k: (variant_order[k[0]], mode_order[k[1]], k[2]))
    keys += [(v, "", False) for v in planned.index if v not in lv["variant"].values and v != UNIGRAM]
    keys.sort(key=lambda k: variant_order[k[0]])  # stable: unfinished variants in their place
    lengths = sorted(int(x) for x in lv["length"].unique())
    groups = {k: g for k, g in lv.groupby([*ROW_KEYS, "length"], sort=False)}
    rows = []
    for key in keys:
        for metric in METRICS:
            for length in lengths:
                g = groups.get((*key, length))
                s = summarize([] if g is None else g[metric].tolist())
                rows.append(dict(zip(CSV_COLUMNS, (*key, length, metric, s.n, s.mean, s.std, s.low, s.high,
                                                   int(planned[key[0]])))))
    return pd.DataFrame(rows, columns=CSV_COLUMNS)


def _cell(mean: float, std: float, n: int, fmt: str) -> str:
    if n == 0 or math.isnan(mean):
        return MISSING
    return fmt.format(mean) + ("" if math.isnan(std) else " ± " + fmt.format(std)) + f" (n={n})"


#: (metric, header, format, scale, best): the table's column blocks
BLOCKS = (("accuracy", "acc@{}", "{:.1f}", 100.0, max), ("bpb", "bpb@{}", "{:.2f}", 1.0, min))


def _rows(c: pd.DataFrame) -> tuple[dict, list[tuple]]:
    """The cells of `cells` by (variant, test positions, log-n, metric, length), and the row keys
    (variant, test positions, log-n) in table order: the one row order of every MLM table."""
    by = {(r.variant, r.test_positions, r.log_n, r.metric, r.length): r for r in c.itertuples(index=False)}
    return by, list(dict.fromkeys(map(tuple, c[ROW_KEYS].itertuples(index=False))))


def _row_label(variant: str, mode: str, log_n: bool) -> list[str]:
    """A row's first three columns: Train, Test positions, log-n (the unigram row has neither)."""
    trained = variant != UNIGRAM
    return [variant, mode or MISSING, ("on" if log_n else "off") if trained and mode else MISSING]


def _last_half_column(lengths: list[int]) -> tuple[str, int, str]:
    """(metric, length, header) of the accuracy over the second half of the longest windows."""
    last = lengths[-1]
    return "acc_last_half", last, f"acc@{last} [{last // 2}:{last}]"


def table_texts(c: pd.DataFrame) -> tuple[list[str], list[list[str]], list[list[bool]]]:
    """(header, rows of text, rows of bold flags): accuracy (%) and bits per byte at each length,
    then the accuracy (%) over the second half of the longest windows. Bold: the best mean of a
    column among the trained rows (ties all bold)."""
    lengths = sorted(int(x) for x in c["length"].unique())
    columns = [(metric, length, head.format(length), fmt, scale, best)
               for metric, head, fmt, scale, best in BLOCKS for length in lengths]
    if lengths:
        columns.append((*_last_half_column(lengths), "{:.1f}", 100.0, max))
    by, keys = _rows(c)
    best = {}
    for metric, length, _, _, _, pick in columns:
        means = [by[(*k, metric, length)].mean for k in keys if k[0] != UNIGRAM and (*k, metric, length) in by]
        finite = [m for m in means if np.isfinite(m)]
        best[(metric, length)] = pick(finite) if finite else None
    header = ["Train", "Test positions", "log-n", *(col[2] for col in columns)]
    rows, bolds = [], []
    for variant, mode, log_n in keys:
        trained = variant != UNIGRAM
        row = _row_label(variant, mode, log_n)
        flags = [False, False, False]
        for metric, length, _, fmt, scale, _ in columns:
            r = by.get((variant, mode, log_n, metric, length))
            if r is None:
                row.append(MISSING)
                flags.append(False)
                continue
            row.append(_cell(r.mean * scale, r.std * scale, int(r.n), fmt))
            target = best[(metric, length)]
            flags.append(trained and target is not None and bool(np.isclose(r.mean, target, rtol=1e-12, atol=0)))
        rows.append(row)
        bolds.append(flags)
    return header, rows, bolds


def intervals_markdown(c: pd.DataFrame) -> str:
    """mlm_intervals.md: the 95% t interval of each accuracy mean of mlm_table.md (%, and n), in
    its rows; the bits-per-byte intervals are in mlm_table.csv."""
    lengths = sorted(int(x) for x in c["length"].unique())
    if not lengths or not (c["n"] > 0).any():
        return "No run has finished yet.\n"
    columns = [("accuracy", n, f"acc@{n}") for n in lengths] + [_last_half_column(lengths)]
    by, keys = _rows(c)
    rows = []
    for variant, mode, log_n in (k for k in keys if k[0] != UNIGRAM):
        row = _row_label(variant, mode, log_n)
        for metric, length, _ in columns:
            r = by.get((variant, mode, log_n, metric, length))
            if r is None or r.n == 0:
                row.append(MISSING)
            elif r.n < 2 or math.isnan(r.low):
                row.append(f"{MISSING} (n={int(r.n)})")
            else:
                row.append(f"[{100 * r.low:.1f}, {100 * r.high:.1f}] (n={int(r.n)})")
        rows.append(row)
    header = ["Train", "Test positions", "log-n", *(col[2] for col in columns)]
    return ("Table: 95% t interval of each accuracy mean (%) in mlm_table.md, and n (runs with a value); "
            "mlm_table.csv has the intervals of every metric\n\n" + markdown_rows(header, rows, escape=md_escape))


def caption(trained: list[int]) -> str:
    train = ", ".join(str(t) for t in trained) or "unknown"
    return ("Masked-token accuracy (%) and bits per byte of the masked tokens by evaluation length: mean ± "
            "sample std (ddof 1) over seeds, n = runs with a value (mlm_intervals.md and mlm_table.csv add the "
            "95% t interval). "
            "Rows: the training positions (and every other option that varies), the test positions, log-n "
            f"scaled attention at test time. Training length: {train} tokens. acc@L [L/2:L]: the accuracy at "
            "indices in the second half of the window. unigram: the add-one unigram model of the training text "
            f"on the same masked tokens. Bold: the best of each column. {MISSING}: no value.")


def _figure_frames(c: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(mean, std) accuracy: one line per trained row ("variant, test + log-n"), lengths as columns."""
    acc = c[(c["metric"] == "accuracy") & (c["variant"] != UNIGRAM) & (c["n"] > 0)].copy()
    acc["line"] = [f"{v}, {m}" + (" + log-n" if ln else "")
                   for v, m, ln in zip(acc["variant"], acc["test_positions"], acc["log_n"])]
    order = list(dict.fromkeys(acc["line"]))
    mean = acc.pivot(index="line", columns="length", values="mean").reindex(order)
    std = acc.pivot(index="line", columns="length", values="std").reindex(order)
    return mean, std


def build(data: SweepData, out: Path) -> dict:
    """Write mlm_table.md, mlm_table.csv (long: every metric, n, mean, std, 95% interval),
    mlm_intervals.md (the accuracy intervals in the table's layout),
    accuracy_vs_length.png/.svg (no figure while no run has a value) and index.html into `out`.
    Returns out, cells (the long frame), done, planned, markdown (mlm_table.md's text) and figure
    (the PNG's name or None)."""
    runs = data.runs
    done = int(runs["done"].fillna(False).astype(bool).sum()) if "done" in runs else 0
    c = cells(runs, data.values)
    trained = lm_aggregate.train_lengths(runs)
    cap = caption(trained)
    header, rows, bolds = table_texts(c)
    finished = bool((c["n"] > 0).any())
    if finished:
        md = f"Table: {md_escape(cap)}\n\n" + markdown_rows(header, rows, bolds, escape=md_escape)
    else:
        md = f"Table: {md_escape(cap)}\n\nNo run has finished yet ({done} of {len(runs)}).\n"
    io.write_text(out / "mlm_table.md", md)
    io.write_text(out / "mlm_table.csv", c[c["n"] > 0].to_csv(index=False, float_format="%.10g"))
    io.write_text(out / "mlm_intervals.md", intervals_markdown(c))
    fig = None
    if finished:
        mean, std = _figure_frames(c)
        fig = metric_against_length(mean, std, "accuracy", trained, out,
                                    f"{data.name}: masked-token accuracy against length")
    io.write_text(out / "index.html", _html(data, runs, done, cap, (header, rows, bolds), finished, fig, out))
    return {"out": out, "cells": c, "done": done, "planned": len(runs), "markdown": md, "figure": fig}


def _html(data, runs, done, cap, table, finished, fig, out) -> str:
    esc = html.escape
    parts = page.opening(data.name, done, len(runs), "Report folder", out)
    parts += ["<h2>Masked-token accuracy and bits per byte by length (Su's MLM experiment)</h2>",
              f"<p>{esc(cap)}</p>"]
    if finished:
        parts.append(html_rows(*table, "mlm_table"))
    else:
        parts.append(f'<p id="no_results">No run has finished yet: no table or figure ({done} of {len(runs)} '
                     "runs finished).</p>")
    if fig:
        parts += ["<h2>Accuracy against length</h2>",
                  (f'<figure><img src="{esc(fig)}" alt="{esc(fig)}"><figcaption>One line per row of the table: '
                   "the mean over seeds, the band ± 1 sample std; dashed lines: log-n at test time; dashed "
                   "vertical: the training length.</figcaption></figure>")]
    return page.document(data.name, parts, STYLE, data.spec_text)


def summary(rep: dict) -> list[str]:
    """What `lengen report` prints: how many runs finished, the table."""
    return [f"{rep['done']} of {rep['planned']} runs finished", rep["markdown"]]
