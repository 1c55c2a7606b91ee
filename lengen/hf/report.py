"""Results of `lengen hf eval`: a printed table, results.csv / results.json and a plot."""

from __future__ import annotations

import csv
import io as _io
import math
from pathlib import Path

from lengen import io
from lengen.cli.options import format_table


def short_length(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def table(result: dict) -> str:
    """Methods as rows, lengths as columns (the shape of the papers' tables)."""
    meta, rows = result["meta"], result["rows"]
    metric = meta["metric"]
    lengths = sorted({r["length"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    value = {(r["method"], r["length"]): r[metric] for r in rows}
    fmt = "{:.2f}" if metric == "accuracy" else "{:.3f}"
    body = [[m, *(value.get((m, n)) for n in lengths)] for m in methods]
    headers = [f"{metric} \\ length", *(short_length(n) for n in lengths)]
    return format_table(headers, body, floatfmt=fmt)


def to_csv(result: dict) -> str:
    metric = result["meta"]["metric"]
    buf = _io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["method", "length", metric])
    for r in result["rows"]:
        writer.writerow([r["method"], r["length"], r[metric]])
    return buf.getvalue()


def plot(result: dict, path: Path, title: str = "") -> None:
    """Metric against length (log2 axis), the trained length marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta, rows = result["meta"], result["rows"]
    metric, train = meta["metric"], meta["train_length"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for method in dict.fromkeys(r["method"] for r in rows):
        pts = sorted((r["length"], r[metric]) for r in rows if r["method"] == method)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", lw=1.6, label=method)
    ax.axvline(train, color="0.3", ls="--", lw=1)
    ax.text(train, 0.98, f" trained length {short_length(train)}", transform=ax.get_xaxis_transform(),
            va="top", ha="left", fontsize=8, color="0.3")
    lengths = sorted({r["length"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [short_length(n) for n in lengths])
    ax.minorticks_off()
    ax.set_xlabel("context length (tokens)")
    if metric == "accuracy":
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("passkey accuracy")
    else:
        values = [r[metric] for r in rows if r[metric] is not None and math.isfinite(r[metric])]
        if values and max(values) / max(min(values), 1e-9) > 4:
            from matplotlib.ticker import FormatStrFormatter

            ax.set_yscale("log")   # plain numbers, not 4 x 10^1
            ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.set_ylabel("perplexity" if meta["protocol"] == "ppl"
                      else f"perplexity of the last {meta['segment']} tokens")
    name = Path(meta["gguf_file"]).stem if meta.get("gguf_file") else Path(meta["model_path"]).name
    ax.set_title(title or f"{name}: {meta['protocol']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    io.save_figure(Path(path), fig)
    plt.close(fig)


def save(result: dict, out: Path, plot_too: bool = True) -> list[Path]:
    out = Path(out)
    paths = [out / "results.csv", out / "results.json"]
    io.write_text(paths[0], to_csv(result))
    io.write_json(paths[1], result)
    if plot_too:
        paths.append(out / "plot.png")
        plot(result, paths[2])
    return paths


def load(out: Path) -> dict | None:
    """An earlier result in `out`, or None."""
    path = Path(out) / "results.json"
    if not path.is_file():
        return None
    try:
        result = io.read_json(path)
        return result if isinstance(result.get("rows"), list) and "meta" in result else None
    except (ValueError, OSError, AttributeError):
        return None
