"""The report of a language-model sweep (`command: lm`): the FIRE paper's C4 log-perplexity table
and its Fig. 1-2 (Li et al. 2023, §4.1) from the sweep's runs, as Markdown, CSV, PNG/SVG and one
offline HTML page. The aggregations are in lengen.reports.lm_aggregate."""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from lengen import io
from lengen.reports import lm_aggregate as lm
from lengen.reports import page
from lengen.reports.figures import metric_against_length
from lengen.reports.load import SweepData
from lengen.reports.render import html_rows, markdown_rows, md_escape
from lengen.sweeps.kinds.lm import metric_of, protocol_of

MISSING = "—"
FMT = "{:.3f}"

PROTOCOLS = {
    "ppl": "the perplexity of whole validation sequences of each length",
    "last-segment": "the perplexity of the last tokens of a validation context of each length",
    "passkey": "passkey retrieval accuracy with a context of each length",
    "ruler": "the RULER-style suite's accuracy (mean over its tasks) with a context of each length",
}

STYLE = page.style("td:first-child,th:first-child{text-align:left}")


def caption(metric: str, protocol: str, trained: list[int]) -> str:
    """What the numbers are, in one line."""
    what = ("Log perplexity (natural log of the per-byte perplexity; lower is better)" if metric == "ppl"
            else "Accuracy (higher is better)")
    train = ", ".join(str(t) for t in trained) or "unknown"
    return (f"{what} by evaluation length: mean ± sample std (ddof 1) over seeds of {PROTOCOLS.get(protocol, protocol)} "
            f"(protocol {protocol}); lm_intervals.md and lm_table.csv give n and the 95% t interval of each mean. "
            f"Bold: the best of each column. (train): a training length ({train} tokens). "
            f"{MISSING}: no value; *: fewer runs than planned" + ("; inf: an infinite perplexity." if metric == "ppl"
                                                                 else "."))


def interval_text(low: float, high: float, n: int, planned: int) -> str:
    """A cell of lm_intervals.md: the 95% interval and n."""
    if n < 2 or math.isnan(low):
        return MISSING + f" (n={n})"
    return f"[{FMT.format(low)}, {FMT.format(high)}] (n={n})" + ("*" if n < planned else "")


def cell_text(mean: float, std: float, n: int, planned: int) -> str:
    if n == 0 or (isinstance(mean, float) and math.isnan(mean)):
        return MISSING
    if math.isinf(mean):
        text = "inf" if mean > 0 else "-inf"
    else:
        text = FMT.format(mean) + ("" if math.isnan(std) else " ± " + FMT.format(std))
    return text + ("*" if n < planned else "")


def table_texts(mean: pd.DataFrame, std: pd.DataFrame, n: pd.DataFrame, planned: dict, best: pd.DataFrame,
                trained: list[int]) -> tuple[list[str], list[list[str]], list[list[bool]]]:
    """(header, rows of text, rows of bold flags); the first column is the variant."""
    header = ["Method", *(lm.length_header(c, trained) for c in mean.columns)]
    rows, bolds = [], []
    for variant in mean.index:
        row, flags = [variant], [False]
        for c in mean.columns:
            row.append(cell_text(float(mean.loc[variant, c]), float(std.loc[variant, c]), int(n.loc[variant, c]),
                                 planned[variant]))
            flags.append(bool(best.loc[variant, c]))
        rows.append(row)
        bolds.append(flags)
    return header, rows, bolds


def intervals_markdown(runs, values, metric: str, planned: dict, trained: list[int]) -> str:
    """lm_intervals.md: the 95% t interval of each cell's mean and its n, in lm_table.md's layout."""
    low, high, n = lm.table(runs, values, metric, columns=("low", "high", "n"))
    if not len(low.columns):
        return "No run has finished yet.\n"
    header = ["Method", *(lm.length_header(c, trained) for c in low.columns)]
    rows = [[v, *(interval_text(float(low.loc[v, c]), float(high.loc[v, c]), int(n.loc[v, c]), planned[v])
                  for c in low.columns)] for v in low.index]
    return ("Table: 95% t interval of each mean in lm_table.md, and n (runs with a value)\n\n" +
            markdown_rows(header, rows, escape=md_escape))


def markdown_table(cap: str, header, rows, bolds) -> str:
    return f"Table: {md_escape(cap)}\n\n" + markdown_rows(header, rows, bolds, escape=md_escape)


def csv_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """The long CSV: variant, encoding, method, length, n, mean, std (ddof 1), low and high (the
    95% t interval); cells with a value only."""
    c = cells[cells["n"] > 0]
    return c[["variant", "encoding", "method", "length", "n", "mean", "std", "low", "high"]].reset_index(drop=True)


def prepared(data: SweepData) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(runs, values, metric) of an LM sweep as the tables read them: numeric run columns, and a
    RULER run's value per length the mean over its tasks (a task too long is NaN)."""
    metric = metric_of(protocol_of(data.evaluation))
    runs = data.runs.astype({c: float for c in ("train_loss", "val_ppl", "seconds")})
    values = data.values
    if "task" in values:
        values = values.groupby(["run_id", "method", "length"], as_index=False, sort=False)[metric].mean()
    return runs, values, metric


def build(data: SweepData, out: Path) -> dict:
    """Write lm_table.md, lm_table.csv, ppl_vs_length.png/.svg (accuracy_vs_length for metric
    accuracy; no figure while no run has a value) and index.html into `out`. Returns out, table
    (the mean DataFrame: variants x lengths), done, planned, missing (variant, length or None,
    runs with a value, planned runs), markdown (lm_table.md's text) and figure (the PNG's name or
    None)."""
    protocol = protocol_of(data.evaluation)
    runs, values, metric = prepared(data)
    done = int(runs["done"].fillna(False).astype(bool).sum()) if "done" in runs else 0
    variants = lm.variants(runs, values)
    cells = lm.cells(runs, values, metric)
    mean, std, n = lm.table(runs, values, metric)
    best = lm.best_cells(mean, metric)
    trained = lm.train_lengths(runs)
    missing = lm.missing_cells(cells, variants)
    planned = dict(zip(variants["variant"], variants["planned"]))

    cap = caption(metric, protocol, trained)
    header, rows, bolds = table_texts(mean, std, n, planned, best, trained)
    if len(mean.columns):
        md = markdown_table(cap, header, rows, bolds)
    else:
        md = f"Table: {md_escape(cap)}\n\nNo run has finished yet ({done} of {len(runs)}).\n"
    io.write_text(out / "lm_table.md", md)
    io.write_text(out / "lm_intervals.md", intervals_markdown(runs, values, metric, planned, trained))
    io.write_text(out / "lm_table.csv", csv_frame(cells).to_csv(index=False, float_format="%.10g"))

    what = "perplexity" if metric == "ppl" else "accuracy"
    fig = metric_against_length(mean, std, metric, trained, out, f"{data.name}: {what} against length ({protocol})")
    io.write_text(out / "index.html", _html(data, metric, runs, done, cap, (header, rows, bolds), len(mean.columns) > 0,
                                            missing, fig, out))
    return {"out": out, "table": mean, "done": done, "planned": len(runs), "missing": missing, "markdown": md,
            "figure": fig}


def _html(data, metric, runs, done, cap, table, has_table, missing, fig, out) -> str:
    esc = html.escape
    parts = page.opening(data.name, done, len(runs), "Report folder", out)
    if missing:
        items = "".join(f"<li>{esc(v)} at {'every length' if length is None else length}: {f} of {p} runs "
                        f"have a value</li>" for v, length, f, p in missing)
        parts.append("<h3>Unfinished cells</h3><p>Cells with fewer values than planned runs: runs not finished, "
                     f"or lengths a model could not take.</p><ul id=\"missing\">{items}</ul>")
    parts += ["<h2>Log perplexity by length (Li et al. 2023, §4.1)</h2>" if metric == "ppl"
              else "<h2>Accuracy by length</h2>", f"<p>{esc(cap)}</p>"]
    if has_table:
        parts.append(html_rows(*table, "lm_table"))
    else:
        parts.append(f'<p id="no_results">No run has finished yet: no table or figure ({done} of {len(runs)} '
                     "runs finished).</p>")
    if fig:
        parts += ["<h2>Against length (Fig. 1-2)</h2>",
                  (f'<figure><img src="{esc(fig)}" alt="{esc(fig)}"><figcaption>One line per variant: the mean '
                   "over seeds, the band ± 1 std; dashed: training length.</figcaption></figure>")]
    return page.document(data.name, parts, STYLE, data.spec_text)


def summary(rep: dict) -> list[str]:
    """What `lengen report` prints: how many runs finished, the table, the unfinished cells."""
    lines = [f"{rep['done']} of {rep['planned']} runs finished", rep["markdown"]]
    if rep["missing"]:
        lines.append(f"{len(rep['missing'])} cells have unfinished runs (listed in index.html)")
    return lines
