"""The report of a language-model sweep (`command: lm`): the FIRE paper's C4 log-perplexity table
and its Fig. 1-2 (Li et al. 2023, §4.1) from the sweep's runs, as Markdown, CSV, PNG/SVG and one
offline HTML page. The aggregations are in lengen.reports.lm_aggregate."""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from lengen import io
from lengen.reports import lm_aggregate as lm
from lengen.reports import page

MISSING = "—"
FMT = "{:.3f}"

PROTOCOLS = {
    "ppl": "the perplexity of whole validation sequences of each length",
    "last-segment": "the perplexity of the last tokens of a validation context of each length",
    "passkey": "passkey retrieval accuracy with a context of each length",
    "ruler": "the RULER-style suite's accuracy (mean over its tasks) with a context of each length",
}

STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
         "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
         "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
         "td:first-child,th:first-child{text-align:left}"
         "img{max-width:100%}pre{background:#f6f6f6;padding:1em}")


def caption(metric: str, protocol: str, trained: list[int]) -> str:
    """What the numbers are, in one line."""
    what = ("Log perplexity (natural log of the per-byte perplexity; lower is better)" if metric == "ppl"
            else "Accuracy (higher is better)")
    train = ", ".join(str(t) for t in trained) or "unknown"
    return (f"{what} by evaluation length: mean ± std (ddof 0) over seeds of {PROTOCOLS.get(protocol, protocol)} "
            f"(protocol {protocol}). Bold: the best of each column. (train): a training length ({train} tokens). "
            f"{MISSING}: no value; *: fewer runs than planned" + ("; inf: an infinite perplexity." if metric == "ppl"
                                                                 else "."))


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


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*")


def markdown_table(cap: str, header, rows, bolds) -> str:
    out = [f"Table: {_md_escape(cap)}", "", "| " + " | ".join(header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    for row, flags in zip(rows, bolds):
        out.append("| " + " | ".join(f"**{_md_escape(t)}**" if b else _md_escape(t) for t, b in zip(row, flags))
                   + " |")
    return "\n".join(out) + "\n"


def html_table(header, rows, bolds, table_id: str = "lm_table") -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for row, flags in zip(rows, bolds):
        tds = "".join(f"<td><b>{esc(t)}</b></td>" if b else f"<td>{esc(t)}</td>" for t, b in zip(row, flags))
        body.append(f"<tr>{tds}</tr>")
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def csv_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """The long CSV: variant, encoding, method, length, mean, std, n; cells with a value only."""
    c = cells[cells["n"] > 0]
    return c[["variant", "encoding", "method", "length", "mean", "std", "n"]].reset_index(drop=True)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(mean: pd.DataFrame, std: pd.DataFrame, metric: str, trained: list[int], out: Path, title: str) -> str | None:
    """Fig. 1-2: one line per variant, mean over seeds with a ±std band, log2 length axis, a dashed
    line at each training length. For ppl the y axis is the perplexity on a log scale: exp of the
    mean log perplexity (the geometric mean over seeds), the band exp(mean ± std). Written as PNG
    and SVG; returns the PNG's name (None when no cell has a finite value)."""
    x = mean.to_numpy(dtype=float)
    if not len(mean.columns) or not np.isfinite(x).any():
        return None
    plt = _plt()
    stem = "ppl_vs_length" if metric == "ppl" else "accuracy_vs_length"
    lengths = np.array([int(c) for c in mean.columns])
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    cmap = plt.get_cmap("tab10" if len(mean.index) <= 10 else "tab20")
    for i, variant in enumerate(mean.index):
        m = mean.loc[variant].to_numpy(dtype=float)
        s = np.nan_to_num(std.loc[variant].to_numpy(dtype=float), nan=0.0)
        ok = np.isfinite(m)
        if not ok.any():
            continue
        colour = cmap(i % cmap.N)
        ls = "-" if " + " not in variant else "--"
        if metric == "ppl":
            y, lo, hi = np.exp(m[ok]), np.exp(m[ok] - s[ok]), np.exp(m[ok] + s[ok])
        else:
            y, lo, hi = m[ok], m[ok] - s[ok], m[ok] + s[ok]
        ax.plot(lengths[ok], y, ls, marker="o", ms=3, lw=1.5, color=colour, label=variant)
        ax.fill_between(lengths[ok], lo, hi, color=colour, alpha=0.15, lw=0)
    for t in trained:
        ax.axvline(t, color="0.3", ls="--", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([str(v) for v in lengths], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("evaluation length (tokens); dashed: training length")
    if metric == "ppl":
        from matplotlib.ticker import FuncFormatter

        ax.set_yscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        low, high = ax.get_ylim()
        if high / low <= 10:  # within a decade the minor ticks carry the only labels
            ax.yaxis.set_minor_formatter(plain)
        ax.tick_params(axis="y", which="both", labelsize=8)
        ax.set_ylabel("perplexity (geometric mean over seeds)")
    else:
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("accuracy (mean over seeds)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    for ext in ("png", "svg"):
        io.save_figure(out / f"{stem}.{ext}", fig)
    plt.close(fig)
    return f"{stem}.png"


def build_lm_report(name: str, runs: pd.DataFrame, values: pd.DataFrame, metric: str, protocol: str,
                    spec_text: str, out) -> dict:
    """Write lm_table.md, lm_table.csv, ppl_vs_length.png/.svg (accuracy_vs_length for metric
    accuracy; no figure while no run has a value) and index.html into `out`. Returns out, table
    (the mean DataFrame: variants x lengths), done, planned, missing (variant, length or None,
    runs with a value, planned runs), markdown (lm_table.md's text) and figure (the PNG's name or
    None)."""
    out = Path(out)
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
        md = f"Table: {_md_escape(cap)}\n\nNo run has finished yet ({done} of {len(runs)}).\n"
    io.write_text(out / "lm_table.md", md)
    io.write_text(out / "lm_table.csv", csv_frame(cells).to_csv(index=False, float_format="%.10g"))

    what = "perplexity" if metric == "ppl" else "accuracy"
    fig = figure(mean, std, metric, trained, out, f"{name}: {what} against length ({protocol})")
    page = _html(name, metric, runs, done, cap, header, rows, bolds, len(mean.columns) > 0, missing, fig,
                 spec_text, out)
    io.write_text(out / "index.html", page)
    return {"out": out, "table": mean, "done": done, "planned": len(runs), "missing": missing, "markdown": md,
            "figure": fig}


def _html(name, metric, runs, done, cap, header, rows, bolds, has_table, missing, fig, spec_text, out) -> str:
    lengen_version = page.lengen_version()
    esc = html.escape
    parts = [f"<h1>lengen report: {esc(name)}</h1>",
             (f"<p>{done} of {len(runs)} runs finished. Report folder <code>{esc(str(out))}</code>; "
              f"lengen {esc(lengen_version)}.</p>")]
    if missing:
        items = "".join(f"<li>{esc(v)} at {'every length' if length is None else length}: {f} of {p} runs "
                        f"have a value</li>" for v, length, f, p in missing)
        parts.append("<h3>Unfinished cells</h3><p>Cells with fewer values than planned runs: runs not finished, "
                     f"or lengths a model could not take.</p><ul id=\"missing\">{items}</ul>")
    parts += ["<h2>Log perplexity by length (Li et al. 2023, §4.1)</h2>" if metric == "ppl"
              else "<h2>Accuracy by length</h2>", f"<p>{esc(cap)}</p>"]
    if has_table:
        parts.append(html_table(header, rows, bolds))
    else:
        parts.append(f'<p id="no_results">No run has finished yet: no table or figure ({done} of {len(runs)} '
                     "runs finished).</p>")
    if fig:
        parts += ["<h2>Against length (Fig. 1-2)</h2>",
                  (f'<figure><img src="{esc(fig)}" alt="{esc(fig)}"><figcaption>One line per variant: the mean '
                   "over seeds, the band ± 1 std; dashed: training length.</figcaption></figure>")]
    parts += ["<h2>The sweep file</h2>", f"<pre>{esc(spec_text or '')}</pre>"]
    return page.document(name, parts, STYLE)
