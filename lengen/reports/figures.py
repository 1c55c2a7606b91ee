"""The papers' figures from a sweep. CHE: accuracy against length per task (Fig. 4, the run each
Table 1 cell selects), and score against max_position when the sweep varies it (Fig. 3); language
models: perplexity or accuracy against length (the FIRE paper's Fig. 1-2). Each figure is written
as PNG and SVG."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lengen import io
from lengen.reports.che_aggregate import best_runs, ordered_tasks, ordered_variants, task_label


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, stem: str) -> list[str]:
    names = []
    for ext in ("png", "svg"):
        io.save_figure(out / f"{stem}.{ext}", fig)
        names.append(f"{stem}.{ext}")
    return names


#: the training-length line: a grey no encoding gets (line_colours)
MARKER_COLOUR = "0.25"


def line_colours(keys: list[str]) -> dict[str, tuple]:
    """One colour per line key, all distinct: tab10 for up to 10 keys, tab20 for up to 20 (a
    sweep can hold 12 encodings and 4 recurrent models), then a continuous map. None is grey,
    so no line takes MARKER_COLOUR's place."""
    import matplotlib

    if len(keys) <= 10:
        cmap = matplotlib.colormaps["tab10"]
        palette = [cmap(i) for i in (0, 1, 2, 3, 4, 5, 6, 8, 9, 7)]  # tab10's grey (7) last
    elif len(keys) <= 20:
        cmap = matplotlib.colormaps["tab20"]
        palette = [cmap(i) for i in range(20) if i not in (14, 15)] + [cmap(14), cmap(15)]  # greys last
    else:
        cmap = matplotlib.colormaps["turbo"]
        palette = [cmap(i / (len(keys) - 1)) for i in range(len(keys))]
    return {k: palette[i] for i, k in enumerate(keys)}


def accuracy_by_length(runs: pd.DataFrame, accuracy: pd.DataFrame, out: Path) -> dict[str, str]:
    """Fig. 4: per task, accuracy against length of each variant's best run, the training lengths
    shaded and a dashed line at N. Returns task -> PNG file name."""
    plt = _plt()
    best = best_runs(runs)
    order = ordered_variants(runs)

    def line_key(r):  # the encoding, or a recurrent baseline's architecture (it reads no encoding)
        model = r.get("model")
        return model if isinstance(model, str) and model != "transformer" else r["pe"]

    def colour_key(variant, r):  # the variant, r_X sharing X's colour (the paper's pairs); recurrent: its architecture
        if line_key(r) != r["pe"]:
            return line_key(r)
        return variant[2:] if r["positions"] == "randomized" and variant.startswith("r_") else variant

    colours = line_colours(list(dict.fromkeys(colour_key(r["variant"], r) for _, r in runs.iterrows())))
    made = {}
    for task in ordered_tasks(best["task"].unique()):
        rows = best[best["task"] == task].set_index("variant").reindex([v for v in order])
        rows = rows[rows["run_id"].notna()]
        fig, ax = plt.subplots(figsize=(7.5, 3.8))
        n = int(rows["train_length"].max())
        ax.axvspan(0.5, n + 0.5, color="0.9", zorder=0)
        ax.axvline(n, color=MARKER_COLOUR, ls="--", lw=1, label=f"N = {n}")
        for variant, r in rows.iterrows():
            acc = accuracy[accuracy["run_id"] == r["run_id"]].sort_values("length")
            # one colour per variant and its randomized twin; randomized positions solid, others
            # dotted; recurrent dash-dot
            ls = "-." if line_key(r) != r["pe"] else "-" if variant.startswith("r_") else ":"
            ax.plot(acc["length"], acc["accuracy"], ls, lw=1.5, color=colours[colour_key(variant, r)],
                    label=f"{variant} ({100 * r['score']:.1f})")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("accuracy")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{task_label(task)}: best run per variant (score in brackets)")
        ax.legend(fontsize=7, ncol=2, loc="lower left")
        ax.grid(alpha=0.3)
        made[task] = _save(fig, out, f"fig4_{task}")[0]
        plt.close(fig)
    return made


def score_vs_max_position(runs: pd.DataFrame, out: Path) -> str | None:
    """Fig. 3: score against max_position, every run as a point and the max as a line, per task
    and variant. None when the sweep does not vary max_position."""
    if "max_position" not in runs or runs["max_position"].nunique() < 2:
        return None
    plt = _plt()
    done = runs[runs["score"].notna()].copy()
    done["variant"] = done["variant"].str.replace(r", max_position=\d+", "", regex=True)
    tasks = ordered_tasks(done["task"].unique())
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        sub = done[done["task"] == task]
        for variant in ordered_variants(sub):
            v = sub[sub["variant"] == variant]
            ax.scatter(v["max_position"], 100 * v["score"], s=8, alpha=0.4)
            best = v.groupby("max_position")["score"].max() * 100
            ax.plot(best.index, best.values, marker="o", label=variant)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("max_position L")
        ax.set_ylabel("score (%)")
        ax.set_title(task_label(task))
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    name = _save(fig, out, "fig3_max_position")[0]
    plt.close(fig)
    return name


def metric_against_length(mean: pd.DataFrame, std: pd.DataFrame, metric: str, trained: list[int], out: Path,
                          title: str) -> str | None:
    """The FIRE paper's Fig. 1-2 from a language-model sweep's table (lengen.reports.lm_aggregate.table):
    one line per variant, mean over seeds with a ±std band, log2 length axis, a dashed
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
        from matplotlib.ticker import FuncFormatter  # matplotlib is optional: imported where it draws

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
    name = _save(fig, out, stem)[0]
    plt.close(fig)
    return name
