"""The report of a CHE sweep (`command: train`): every table and figure of the seed paper (Ruoss et
al. 2023), beside its published Table 1, as Markdown, CSV, PNG/SVG and one offline HTML page that
holds them all. The aggregations are in lengen.reports.che_aggregate."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd

from lengen import io
from lengen.reports import che_aggregate as agg
from lengen.reports import page
from lengen.reports import published as pub
from lengen.reports.figures import accuracy_by_length, score_vs_max_position
from lengen.reports.load import SweepData
from lengen.reports.render import html_table, markdown, markdown_rows, simple_markdown
from lengen.sweeps.spec import VARIANT

STYLE = page.style("td:nth-child(2),th:nth-child(2),td:first-child{text-align:left}",
                   "tr.average td{border-top:2px solid #333}")


def _csv(table: pd.DataFrame, path: Path, index_label: str = "task") -> None:
    io.write_text(path, table.to_csv(index_label=index_label, float_format="%.4g"))


def _long(frames: dict[str, pd.DataFrame], lr: pd.DataFrame) -> pd.DataFrame:
    """Tasks x variants frames as one long table: task, variant, lr, then one column per frame;
    a row per cell with a mean."""
    mean = frames["mean"]
    rows = [{"task": task, "variant": col, "lr": lr.loc[task, col],
             **{k: f.loc[task, col] for k, f in frames.items()}}
            for task in mean.index for col in mean.columns if pd.notna(mean.loc[task, col])]
    return pd.DataFrame(rows, columns=["task", "variant", "lr", *frames])


def seeds_caption(stats: dict) -> str:
    """How many seeds the cells average: "n = 5 seeds per cell" or "n = 3-5 seeds per cell"."""
    n = stats["n"].stack()
    lo, hi = int(n.min()), int(n.max())
    return f"n = {lo} seed{'s' if lo > 1 else ''} per cell" if lo == hi else f"n = {lo}-{hi} seeds per cell"


def stats_markdown(stats: dict) -> str:
    """Table 4's cells as mean ± sample std (ddof 1) [95% t interval], x 100."""
    return markdown(stats["mean"], std=stats["std"], interval=(stats["low"], stats["high"]))


def lr_markdown(lrs: pd.DataFrame) -> str:
    """Rows: task and variant; columns: learning rates; cells: mean ± sample std [95% t interval]
    (n) of the score x 100; bold: the best mean of the row (the lr Table 4 takes)."""
    rates = sorted(lrs["lr"].unique())
    header = ["Task", "Variant", *(f"lr {lr:g}" for lr in rates)]
    rows, bolds = [], []
    for (task, variant), g in lrs.groupby(["task", "variant"], sort=False):
        g = g.set_index("lr")
        best = g["mean"].max()
        row, flags = [agg.task_label(task), variant], [False, False]
        for lr in rates:
            if lr not in g.index:
                row.append("—")
                flags.append(False)
                continue
            c = g.loc[lr]
            text = f"{c['mean']:.1f}" if c["n"] < 2 else f"{c['mean']:.1f} ± {c['std']:.1f} [{c['low']:.1f}, {c['high']:.1f}]"
            row.append(f"{text} (n={int(c['n'])})")
            flags.append(bool(c["mean"] == best))
        rows.append(row)
        bolds.append(flags)
    return markdown_rows(header, rows, bolds)


def comparison_text(cmp: dict) -> str:
    g = cmp["mean_gain"]
    lines = []
    if cmp.get("protocol"):
        lines.append("- Not the paper's protocol: " + "; ".join(cmp["protocol"]) +
                     ". The differences below are not the paper's numbers at a smaller scale.")
    if g["measured"] is not None:
        lines.append(f"- Randomized minus standard positions, best cell of each side per task, averaged over "
                     f"tasks: **{g['measured']:+.1f}** points measured; {g['published_same_cells']:+.1f} in the "
                     f"paper on the same cells ({g['published_paper']:+.1f} on its full table).")
    for enc, w in cmp["wins"].items():
        lines.append(f"- {enc}: randomized has the higher best-of-seeds score on {w['measured']} of {w['tasks']} "
                     f"tasks (paper: {w['published']} of {w['tasks']}).")
    if cmp["wins"]:
        lines.append("- These counts compare maxima over seeds, not a test: `lengen report SWEEP --compare A B` "
                     "gives the paired difference over seeds with its interval.")
    solved_m = {t: c for t, c in cmp["solved"]["measured"].items() if c}
    solved_p = {t: c for t, c in cmp["solved"]["published"].items() if c}
    lines.append("- Solved (> 90%): measured " + (", ".join(f"{t} ({', '.join(c)})" for t, c in solved_m.items())
                                                   or "none") + "; paper " +
                 (", ".join(f"{t} ({', '.join(c)})" for t, c in solved_p.items()) or "none") + ".")
    return "\n".join(lines) + "\n"


def file_variant_labels(data: SweepData, runs: pd.DataFrame) -> dict[str, list[str]]:
    """The sweep file's `variants:` names, each with the labels (`variant_runs`) of its runs, in
    table order: `--compare` takes either."""
    if not data.spec_text:   # a folder without its file: the labels alone
        return {}
    name_of = {rid: point.get(VARIANT) for rid, point in zip(data.runs["run_id"], data.points)}
    named: dict[str, list[str]] = {}
    for rid, label in zip(runs["run_id"], runs["variant"]):
        if name_of.get(rid) is not None and label not in named.setdefault(name_of[rid], []):
            named[name_of[rid]].append(label)
    return named


def variant_runs(data: SweepData) -> pd.DataFrame:
    """The sweep's planned runs with float scores and times and each run's variant label."""
    runs = data.runs.assign(model=[cfg.model.architecture for cfg in data.configs],  # a recurrent run's label
                            score=data.runs["score"].astype(float), seconds=data.runs["seconds"].astype(float))
    return agg.add_variants(runs)


def build(data: SweepData, out: Path) -> dict:
    """Write the tables, the comparison, the figures and index.html into `out`. Returns out,
    table1, done, planned, missing (task, variant, finished, planned) and comparison (or None)."""
    runs = variant_runs(data)
    done = int(runs["done"].sum())
    t1 = agg.table1(runs)
    t4_mean, t4_std, t4_lr = agg.table4(runs) if done else (t1, t1, t1)
    t2_mean, t2_std = agg.table2(runs) if done else (t1, t1)
    missing = agg.missing_cells(runs)

    io.write_text(out / "table1.md", markdown(t1))
    _csv(t1, out / "table1.csv")
    io.write_text(out / "table4.md", markdown(t4_mean, std=t4_std))
    _csv(_long({"mean": t4_mean, "std": t4_std}, t4_lr), out / "table4.csv", index_label="row")
    stats = agg.seed_statistics(runs) if done else None
    if stats is not None:
        io.write_text(out / "seed_stats.md", stats_markdown(stats))
        _csv(_long(stats, t4_lr), out / "seed_stats.csv", index_label="row")
    lrs = agg.by_lr(runs) if done else None
    if lrs is not None and runs["lr"].nunique() > 1:
        io.write_text(out / "table_lr.md", lr_markdown(lrs))
        io.write_text(out / "table_lr.csv", lrs.to_csv(index=False, float_format="%.4g"))
    io.write_text(out / "table2.md", markdown(t2_mean, std=t2_std, fmt="{:.0f}", bold_max=False, average=False))
    _csv(t2_mean, out / "table2.csv")

    cmp = pub.compare(t1, runs) if pub.comparable(t1) and done else None
    if cmp is not None:
        io.write_text(out / "comparison.md", comparison_text(cmp) + "\n" + simple_markdown(cmp["cells"]))
        io.write_text(out / "comparison.csv", cmp["cells"].to_csv(index=False, float_format="%.4g"))

    fig4 = accuracy_by_length(runs, data.values, out) if done else {}
    fig3 = score_vs_max_position(runs, out) if done else None

    io.write_text(out / "index.html", _html(data, runs, t1, (t4_mean, t4_std), stats, (t2_mean, t2_std), missing,
                                            cmp, fig4, fig3))
    return {"out": out, "table1": t1, "done": done, "planned": len(runs), "missing": missing,
            "comparison": cmp}


def _html(data, runs, t1, t4, stats, t2, missing, cmp, fig4, fig3) -> str:
    esc = html.escape
    parts = page.opening(data.name, int(runs["done"].sum()), len(runs), "Sweep folder", data.path)
    if missing:
        items = "".join(f"<li>{esc(t)} / {esc(v)}: {f} of {n} runs finished</li>" for t, v, f, n in missing)
        parts.append(f"<h3>Unfinished cells</h3><ul id=\"missing\">{items}</ul>"
                     "<p>— marks a cell with no finished run; * an average over fewer tasks.</p>")
    parts += ["<h2>Table 1: best score (%) over learning rates and seeds</h2>",
              "<p>Score = mean accuracy over the lengths beyond training (N+1..M); † = permutation-invariant "
              "task; bold = best of the row.</p>", html_table(t1, "table1")]
    if cmp is not None:
        cells = cmp["cells"]
        rows = "".join(f"<tr><td>{esc(r.task)}</td><td>{esc(r.encoding)}</td><td>{r.measured:.1f}</td>"
                       f"<td>{r.published:.1f}</td><td>{r.difference:+.1f}</td></tr>" for r in cells.itertuples())
        claims = "".join("<li>" + re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", esc(line[2:])) + "</li>"
                         for line in comparison_text(cmp).splitlines())
        parts += ["<h2>Beside the published Table 1 (Ruoss et al. 2023)</h2>", f"<ul>{claims}</ul>",
                  "<table id=\"comparison\"><thead><tr><th>task</th><th>encoding</th><th>measured</th>"
                  f"<th>published</th><th>difference</th></tr></thead><tbody>{rows}</tbody></table>"]
    parts += ["<h2>Table 4: mean ± std over seeds at the best learning rate</h2>",
              "<p>As the paper gives it; the std is the population std (ddof 0), lengen's reading "
              "of the paper's unstated convention.</p>",
              html_table(t4[0], "table4", std=t4[1])]
    if stats is not None:
        parts += ["<h2>Seed statistics: Table 4's cells with the sample std and a 95% interval</h2>",
                  f"<p>mean ± sample std (ddof 1) [95% t interval of the mean], {esc(seeds_caption(stats))}; "
                  "cells of fewer than 2 runs have neither.</p>",
                  html_table(stats["mean"], "seed_stats", std=stats["std"], interval=(stats["low"], stats["high"]))]
    parts += ["<h2>Table 2: wall time per run (s, mean ± std)</h2>",
              html_table(t2[0], "table2", std=t2[1], fmt="{:.0f}", bold_max=False, average=False)]
    if fig4:
        parts.append("<h2>Figure 4: accuracy against length (the run of each Table 1 cell)</h2>")
        parts += [f'<figure><img src="{esc(name)}" alt="{esc(task)}"><figcaption>{esc(task)}</figcaption></figure>'
                  for task, name in fig4.items()]
    if fig3:
        parts += ["<h2>Figure 3: score against max_position</h2>", f'<figure><img src="{esc(fig3)}"></figure>']
    parts.append("<p>Figure 2 (score against training time) needs evaluations during training, which lengen "
                 "sweeps do not log yet.</p>")
    return page.document(data.name, parts, STYLE, data.spec_text)


def summary(rep: dict) -> list[str]:
    """What `lengen report` prints: Table 1, the unfinished cells, the average gain."""
    lines = [f"Table 1 ({rep['done']} of {rep['planned']} runs finished): best score (%) over learning rates "
             "and seeds", markdown(rep["table1"])]
    if rep["missing"]:
        lines.append(f"{len(rep['missing'])} cells have unfinished runs (listed in index.html)")
    if rep["comparison"] is not None:
        g = rep["comparison"]["mean_gain"]
        if g["measured"] is not None:
            lines.append(f"randomized - standard, averaged over tasks: {g['measured']:+.1f} points "
                         f"(paper on the same cells: {g['published_same_cells']:+.1f}; full table: +12.0)")
    return lines
