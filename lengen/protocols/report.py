"""Results of a protocol run: results.csv (one row per method and length), results.json, a
markdown table (methods x lengths) and a plot against length with the training length marked."""

from __future__ import annotations

import csv
import io as _io
import math
from pathlib import Path

from lengen import io
from lengen.formatting import format_table


def write_csv(path: Path, rows: list[dict]) -> None:
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    buf = _io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    io.write_text(path, buf.getvalue())


def csv_disagreement(path: Path, rows: list[dict]) -> str | None:
    """Why the CSV at `path` is not (a subset of) what write_csv(path, rows) writes: another header
    or a row that `rows` lacks, in words; None when it agrees or is absent. A CSV missing some of
    the rows is agreement: a run stopped between writing its record and its CSV."""
    path = Path(path)
    if not path.is_file():
        return None
    columns = list(dict.fromkeys(k for r in rows for k in r))
    expected = {tuple("" if r.get(k) is None else str(r.get(k)) for k in columns) for r in rows}
    try:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            found = [tuple(r) for r in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        return f"unreadable: {e}"
    if header is None and not rows:
        return None
    if header != columns:
        return f"its columns are {','.join(header or []) or 'none'}, not {','.join(columns)}"
    extra = [r for r in found if r not in expected]
    return f"{len(extra)} of its {len(found)} rows are not in the record" if extra else None


def pivot_table(rows: list[dict], metric: str, floatfmt: str = "{:.3f}") -> str:
    """Markdown: one row per method, one column per length."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    lengths = sorted({r["length"] for r in rows})
    value = {(r["method"], r["length"]): r.get(metric) for r in rows}
    body = []
    for m in methods:
        cells = []
        for L in lengths:
            v = value.get((m, L))
            cells.append(None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v))
        body.append([m, *cells])
    return format_table(["method", *(str(L) for L in lengths)], body, floatfmt)


def plot_metric(rows: list[dict], metric: str, train_length: int | None, path: Path, title: str = "",
                log_y: bool = True) -> None:
    """The metric against length, one line per method, the training length marked. When a
    perplexity spans more than a decade (a method that collapses), a second panel zooms in on the
    range the best methods stay in, on a linear scale, so their differences stay visible."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {}
    for m in dict.fromkeys(r["method"] for r in rows):
        pts = sorted((r["length"], r[metric]) for r in rows
                     if r["method"] == m and r.get(metric) is not None and not math.isnan(r[metric]))
        if pts:
            series[m] = pts
    values = [v for pts in series.values() for _, v in pts]
    low = min(values, default=1.0)
    zoom = log_y and low > 0 and max(values, default=1.0) / low > 10
    fig, axes = plt.subplots(1, 2 if zoom else 1, figsize=(11 if zoom else 7, 4), squeeze=False)
    for i, ax in enumerate(axes[0]):
        for m, pts in series.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", lw=1.6, label=m)
        if train_length:
            ax.axvline(train_length, color="0.3", ls="--", lw=1, label=f"training length {train_length}")
        _length_axis(ax, sorted({r["length"] for r in rows}))
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3, which="both")
        if i == 0 and log_y:
            _log_axis(ax, low, max(values, default=1.0))
        if i == 1:
            ax.set_ylim(low * 0.97, low * 1.5)
            ax.set_title(f"zoom: {metric} below {low * 1.5:.3g}", fontsize=10)
    axes[0][0].set_title(title)
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    io.save_figure(Path(path), fig)
    plt.close(fig)


def _length_axis(ax, lengths: list[int]) -> None:
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(L) for L in lengths])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("context length (tokens)")


def _log_axis(ax, low: float, high: float) -> None:
    """Log scale with plain numbers; minor ticks labelled only within about a decade."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter() if high / max(low, 1e-12) <= 10 else NullFormatter())


def write_results(out_dir: Path, rows: list[dict], meta: dict, metric: str, train_length: int | None,
                  title: str = "", plot_name: str = "results.png") -> str:
    """Write results.csv, results.json and the plot into out_dir; return the markdown table."""
    out_dir = Path(out_dir)
    write_csv(out_dir / "results.csv", rows)
    table = pivot_table(rows, metric)
    clean = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]
    io.write_json(out_dir / "results.json", {**meta, "metric": metric, "rows": clean, "table": table})
    plot_results(rows, metric, train_length, out_dir / plot_name, title)
    return table


def plot_results(rows: list[dict], metric: str, train_length: int | None, path: Path, title: str = "") -> None:
    """The plot `write_results` draws (docs/ redraws it from the committed rows): a perplexity
    on a log axis, an accuracy on a linear one."""
    plot_metric(rows, metric, train_length, path, title, log_y=metric != "accuracy")
