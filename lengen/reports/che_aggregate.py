"""The seed paper's aggregations (Ruoss et al. 2023, arXiv 2305.16843) over a
table of runs, one row per run, as pandas DataFrames. Pure functions: the tests feed them hand-made
tables.

A run's *variant* is everything that defines a column of the paper's tables: the encoding, the
position sampler and any other option that varies in the sweep, except the task (rows), the
learning rate and the seed (what the cells maximise or average over). Labels follow the paper:
`rope` for standard positions, `r_rope` for randomized ones, `rope (equal_mean)` for any other
sampler (under its paper's name where lengen.reports.lm_aggregate.POSITION_LABELS has one:
`rope (PoSE)`), with other varying options appended (`rope, logit_scale=log_n`). A recurrent baseline's
column is its architecture (`Stack-RNN`), after the Transformer's columns, with only the options
it reads appended (`Stack-RNN, memory_size=64`).

- Table 1: per task and variant, 100 x the max score over learning rates and seeds.
- Table 4: per task and variant, mean and std (ddof 0) over seeds at the learning rate with the
  best mean (the paper does not say which std; ddof 0 is lengen's reading).
- Seed statistics: Table 4's cells with n, the sample std (ddof 1) and a 95% t interval; the
  same for every learning rate (by_lr), when the sweep varies it.
- Table 2: per task and variant, mean and std of a run's wall time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lengen.models.config import ARCHITECTURE_LABELS, ARCHITECTURES
from lengen.reports.lm_aggregate import option_label, position_label
from lengen.reports.stats import summarize
from lengen.tasks import TASK_NAMES, get_task
from lengen.che.config import options_not_read

#: columns that are never part of a variant
NOT_VARIANT = {"run_id", "task", "lr", "seed", "score", "accuracy_in_train_range", "seconds", "train_seconds",
               "eval_seconds", "device", "done", "test_positions", "variant", "variant_order", "model"}
LEVELS = ("R", "DCF", "CS")
STANDARD, RANDOMIZED = "standard", "randomized"


def variant_columns(runs: pd.DataFrame) -> list[str]:
    """pe, positions, then every other column that varies between runs (in table order).
    test_positions joins only where it is not implied by the sampler."""
    cols = ["pe", "positions"]
    for c in runs.columns:
        if c in NOT_VARIANT or c in cols:
            continue
        if runs[c].astype(str).nunique(dropna=False) > 1:
            cols.append(c)
    if "test_positions" in runs and (runs.groupby("positions")["test_positions"].nunique() > 1).any():
        cols.append("test_positions")
    return cols


def _fmt(v) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v)


def _architecture(row) -> str:
    model = row.get("model", "transformer")
    return "transformer" if pd.isna(model) else str(model)


def variant_label(row, columns: list[str]) -> str:
    arch = _architecture(row)
    if arch != "transformer":
        unread = set(options_not_read(arch)) if arch in ARCHITECTURES else set()
        extra = [f"{c}={_fmt(row[c])}" for c in columns
                 if c not in ("pe", "positions") and c.split(".")[0] not in unread and pd.notna(row[c])]
        return ", ".join([ARCHITECTURE_LABELS.get(arch, arch), *extra])
    pe, positions = row["pe"], row["positions"]
    label = (f"r_{pe}" if positions == RANDOMIZED else pe if positions == STANDARD
             else f"{pe} ({position_label(positions)})")
    extra = [option_label(c, row[c], _fmt) for c in columns if c not in ("pe", "positions") and pd.notna(row[c])]
    return ", ".join([label, *filter(None, extra)])


def add_variants(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with a `variant` column and a `variant_order` column (standard samplers first,
    then randomized, then others; within a group, order of first appearance)."""
    runs = runs.copy()
    cols = variant_columns(runs)
    runs["variant"] = [variant_label(r, cols) for _, r in runs.iterrows()]
    group = runs["positions"].map(lambda p: 0 if p == STANDARD else 1 if p == RANDOMIZED else 2)
    if "model" in runs:  # recurrent baselines after the Transformer, in the benchmark's order
        arch = runs.apply(_architecture, axis=1)
        recurrent = arch != "transformer"
        group = group.where(~recurrent, 3 + arch.map(lambda a: ARCHITECTURES.index(a) if a in ARCHITECTURES
                                                       else len(ARCHITECTURES)))
    first = {v: i for i, v in reversed(list(enumerate(runs["variant"])))}
    runs["variant_order"] = list(zip(group, runs["variant"].map(first)))
    return runs


def ordered_variants(runs: pd.DataFrame) -> list[str]:
    order = runs.drop_duplicates("variant").sort_values("variant_order", kind="stable")
    return list(order["variant"])


def ordered_tasks(tasks) -> list[str]:
    """Tasks in the paper's order: by level (R, DCF, CS), then lengen's task order."""
    tasks = set(tasks)
    known = [t for t in TASK_NAMES if t in tasks]
    return sorted(known, key=lambda t: LEVELS.index(get_task(t).level)) + sorted(tasks - set(known))


def task_label(task: str) -> str:
    """The paper's dagger for permutation-invariant tasks."""
    try:
        return task + (" †" if get_task(task).permutation_invariant else "")
    except Exception:  # noqa: BLE001 - a task lengen does not know keeps its name
        return task


def _pivot(values: pd.Series, runs: pd.DataFrame) -> pd.DataFrame:
    table = values.unstack("variant")
    tasks = ordered_tasks(runs["task"].unique())
    return table.reindex(index=tasks, columns=ordered_variants(runs))


def table1(runs: pd.DataFrame) -> pd.DataFrame:
    """Tasks x variants: 100 x max score over learning rates and seeds (NaN: no finished run)."""
    done = runs[runs["score"].notna()]
    best = done.groupby(["task", "variant"])["score"].max() * 100
    return _pivot(best, runs)


def best_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The run each Table 1 cell shows (highest score; ties: the first in sweep order)."""
    done = runs[runs["score"].notna()]
    idx = done.groupby(["task", "variant"], sort=False)["score"].idxmax()
    return done.loc[idx.values]


def table4(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(mean, std, lr): tasks x variants, 100 x mean and std (ddof 0) of the score over seeds at
    the learning rate with the best mean."""
    done = runs[runs["score"].notna()]
    per_lr = done.groupby(["task", "variant", "lr"])["score"].agg(mean="mean", std=lambda s: s.std(ddof=0),
                                                                    n="size")
    best = per_lr.loc[per_lr.groupby(["task", "variant"])["mean"].idxmax()]
    best = best.reset_index(level="lr")
    return (_pivot(best["mean"] * 100, runs), _pivot(best["std"] * 100, runs), _pivot(best["lr"], runs))


def seed_statistics(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Table 4's cells (the learning rate with the best mean) as a reviewer reads them: tasks x
    variants frames `n`, `mean`, `std` (sample std, ddof 1), `low` and `high` (the 95% t
    interval of the mean, lengen.reports.stats), x 100; NaN where a cell has fewer than 2 runs."""
    mean, _, lr = table4(runs)
    done = runs[runs["score"].notna()]
    out = {name: pd.DataFrame(np.nan, index=mean.index, columns=mean.columns)
           for name in ("n", "mean", "std", "low", "high")}
    for task in mean.index:
        for variant in mean.columns:
            if pd.isna(mean.loc[task, variant]):
                continue
            cell = done[(done["task"] == task) & (done["variant"] == variant) & (done["lr"] == lr.loc[task, variant])]
            s = summarize(100 * cell["score"].astype(float))
            for name in out:
                out[name].loc[task, variant] = getattr(s, name)
    return out


def by_lr(runs: pd.DataFrame) -> pd.DataFrame:
    """Long form, one row per task, variant and learning rate: n, mean, sample std (ddof 1) and
    the 95% t interval of the score over seeds, x 100 (what Table 4 chooses between)."""
    done = runs[runs["score"].notna()]
    rows = []
    for task in ordered_tasks(done["task"].unique()):
        for variant in ordered_variants(runs):
            cell = done[(done["task"] == task) & (done["variant"] == variant)]
            for lr in sorted(cell["lr"].unique()):
                s = summarize(100 * cell.loc[cell["lr"] == lr, "score"].astype(float))
                rows.append({"task": task, "variant": variant, "lr": lr, "n": s.n, "mean": s.mean, "std": s.std,
                             "low": s.low, "high": s.high})
    return pd.DataFrame(rows, columns=["task", "variant", "lr", "n", "mean", "std", "low", "high"])


def table2(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(mean, std) of a run's wall time in seconds (training + evaluation), tasks x variants."""
    done = runs[runs["seconds"].notna()]
    g = done.groupby(["task", "variant"])["seconds"]
    return _pivot(g.mean(), runs), _pivot(g.std(ddof=0), runs)


def missing_cells(runs: pd.DataFrame) -> list[tuple[str, str, int, int]]:
    """(task, variant, finished, planned) for every cell with unfinished runs."""
    g = runs.groupby(["task", "variant"])["score"]
    out = []
    for (task, variant), scores in g:
        finished = int(scores.notna().sum())
        if finished < len(scores):
            out.append((task, variant, finished, len(scores)))
    order = {t: i for i, t in enumerate(ordered_tasks(runs["task"].unique()))}
    vorder = {v: i for i, v in enumerate(ordered_variants(runs))}
    return sorted(out, key=lambda c: (order[c[0]], vorder[c[1]]))


def randomized_gain(table: pd.DataFrame) -> pd.Series:
    """Per task: max over randomized columns minus max over standard columns (the paper's
    "+12.0% on average": its mean over tasks). NaN where a side has no value."""
    plain = [c for c in table.columns if "," not in c and "(" not in c and c not in ARCHITECTURE_LABELS.values()]
    rand = [c for c in plain if c.startswith("r_")]
    std = [c for c in plain if not c.startswith("r_")]
    if not rand or not std:
        return pd.Series(np.nan, index=table.index)
    return table[rand].max(axis=1, skipna=True) - table[std].max(axis=1, skipna=True)
