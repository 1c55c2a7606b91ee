"""`lengen report SWEEP --compare A B`: two variants of a CHE sweep (Table 1's column labels, e.g.
`r_rope` and `rope`) paired cell by cell, a cell being one task, learning rate and seed that both
finished. Per task and over all tasks: the mean paired difference of the score (x 100), its
sample std, 95% t interval, the cells where each side wins, and the verdict the interval allows
(lengen.reports.stats).

`--versus BASE`: every other variant against BASE in one table, the same pairing, one row per
variant (its differences per task and over all tasks)."""

from __future__ import annotations

import math

import pandas as pd

from lengen.errors import LengenError
from lengen.formatting import quoted_list
from lengen.reports.che_aggregate import ordered_tasks, ordered_variants
from lengen.reports.stats import paired

CELL = ("task", "lr", "seed")
ALL_TASKS = "all tasks"


def _scores(runs: pd.DataFrame, variant: str) -> dict:
    done = runs[(runs["variant"] == variant) & runs["score"].notna()]
    return {tuple(r[c] for c in CELL): 100 * float(r["score"]) for _, r in done.iterrows()}


def _check_known(runs: pd.DataFrame, name: str, flag: str) -> None:
    known = ordered_variants(runs)
    if name not in known:
        raise LengenError(f"{flag}: no variant {name!r} in this sweep; its variants: {quoted_list(known)}")


def resolve_variant(runs: pd.DataFrame, name: str, flag: str, named: dict[str, list[str]] | None = None) -> str:
    """The variant label `name` means: a label of `runs` as given, or a sweep file's `variants:`
    name (`named`: name -> the labels of its runs) that stands for exactly one label."""
    if name in set(runs["variant"]) or not named or name not in named:
        _check_known(runs, name, flag)
        return name
    labels = named[name]
    if len(labels) != 1:
        raise LengenError(f"{flag}: the sweep file's variant {name!r} has runs under {len(labels)} labels "
                          f"(it is crossed with the grid): give one of {quoted_list(labels)}")
    return labels[0]


def compare_variants(runs: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """One row per task both variants have, then one over all tasks: n (paired cells), the mean
    difference a - b, its std (ddof 1), the 95% interval, wins of each side and the verdict for a."""
    for name in (a, b):
        _check_known(runs, name, "--compare")
    if a == b:
        raise LengenError("--compare needs two different variants")
    sa, sb = _scores(runs, a), _scores(runs, b)
    tasks = ordered_tasks({k[0] for k in sa if k in sb})
    if not tasks:
        raise LengenError(f"--compare: {a!r} and {b!r} have no finished run at a common task, lr and seed")
    rows = []
    for task in [*tasks, ALL_TASKS]:
        keep = (lambda k: True) if task == ALL_TASKS else (lambda k, t=task: k[0] == t)
        p = paired({k: v for k, v in sa.items() if keep(k)}, {k: v for k, v in sb.items() if keep(k)})
        d = p.difference
        rows.append({"task": task, "n": d.n, "difference": d.mean, "std": d.std, "low": d.low, "high": d.high,
                     f"{a} wins": p.a_wins, f"{b} wins": p.b_wins, "ties": p.ties, "verdict": p.verdict})
    return pd.DataFrame(rows)


def comparison_markdown(table: pd.DataFrame, a: str, b: str) -> str:
    """The table as the command prints it: differences in points of score (x 100)."""
    def num(v):
        return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:+.1f}"

    head = ["task", "n", f"{a} - {b}", "std", "95% interval", f"{a} wins", f"{b} wins", "ties", f"{a} vs {b}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for _, r in table.iterrows():
        interval = "—" if r["n"] < 2 else f"[{num(r['low'])}, {num(r['high'])}]"
        std = "—" if r["n"] < 2 else f"{r['std']:.1f}"
        lines.append("| " + " | ".join([str(r["task"]), str(r["n"]), num(r["difference"]), std, interval,
                                        str(r[f"{a} wins"]), str(r[f"{b} wins"]), str(r["ties"]), r["verdict"]]) + " |")
    return "\n".join(lines)


def versus(runs: pd.DataFrame, base: str) -> pd.DataFrame:
    """`compare_variants(runs, v, base)` for every other variant v that shares a cell with `base`,
    stacked: one row per (variant, task), then the variant's row over all tasks."""
    _check_known(runs, base, "--versus")
    others = [v for v in ordered_variants(runs) if v != base]
    tables = []
    for v in others:
        try:
            tables.append(compare_variants(runs, v, base).rename(columns={f"{v} wins": "wins", f"{base} wins": "losses"})
                          .assign(variant=v))
        except LengenError:   # no cell in common with base
            continue
    if not tables:
        raise LengenError(f"--versus: no variant has a finished run at a task, lr and seed where {base!r} has one")
    return pd.concat(tables, ignore_index=True)


def versus_markdown(table: pd.DataFrame, base: str) -> str:
    """One row per variant: its mean paired difference from `base` (points of score) per task and
    over all tasks with the 95% t interval, the cells it wins and loses, and the verdict."""
    def cell(r) -> str:
        if r["n"] < 2:
            return f"{r['difference']:+.1f}"
        return f"{r['difference']:+.1f} [{r['low']:+.1f}, {r['high']:+.1f}]"

    tasks = [t for t in dict.fromkeys(table["task"]) if t != ALL_TASKS]
    head = ["variant", *(f"{t} (n)" for t in tasks), f"{ALL_TASKS} (n)", "wins / losses", f"vs {base}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for variant, group in table.groupby("variant", sort=False):
        by = {r["task"]: r for _, r in group.iterrows()}
        every = by[ALL_TASKS]
        cells = [f"{cell(by[t])} ({by[t]['n']})" if t in by else "—" for t in tasks]
        lines.append("| " + " | ".join([variant, *cells, f"{cell(every)} ({every['n']})",
                                        f"{every['wins']} / {every['losses']}", every["verdict"]]) + " |")
    return "\n".join(lines) + "\n"
