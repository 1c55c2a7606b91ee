"""The seed paper's published numbers (Ruoss et al. 2023, arXiv 2305.16843, Table 1, transcribed
from the paper), shipped with lengen, and the
comparison of a sweep's Table 1 with them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lengen.formatting import count_noun
from lengen.reports.che_aggregate import randomized_gain

DATA = Path(__file__).with_name("data")
PAPER_COLUMNS = ["none", "sincos", "relative", "alibi", "rope", "learned",
                 "r_sincos", "r_relative", "r_alibi", "r_rope", "r_learned"]
PAPER_AVERAGE_GAIN = 12.0  # "Our randomized method increases the test accuracy by 12.0% on average"
# Its protocol (seed 003, section 4 and Appendix A): "three learning rates 1e-4, 3e-4, 5e-4",
# "2 000 000 steps with a batch size of 128", U(1, N) with N = 40 and test lengths N+1..M, M = 500,
# "10 different parameter initialization random seeds".
PAPER_PROTOCOL = {"lr": (1e-4, 3e-4, 5e-4), "steps": 2_000_000, "train_length": 40, "max_length": 500, "seeds": 10}


def published_table1() -> pd.DataFrame:
    return pd.read_csv(DATA / "ruoss2023_table1.csv").set_index("task").drop(columns="level")


def comparable(table: pd.DataFrame) -> bool:
    """The sweep's columns are the paper's encodings (standard / randomized positions only) and its
    rows the paper's tasks: then its cells can stand beside the published ones."""
    paper = published_table1()
    return (len(table.columns) > 0 and set(table.columns) <= set(PAPER_COLUMNS)
            and set(table.index) <= set(paper.index))


def protocol_differences(runs: pd.DataFrame) -> list[str]:
    """Where the finished runs' protocol differs from the paper's: learning rates, steps, training
    and test lengths, seeds; one phrase each ("1,000 steps (paper: 2,000,000)"), [] when none does."""
    done = runs[runs["done"]] if "done" in runs else runs
    paper, out = PAPER_PROTOCOL, []
    lrs = sorted(float(x) for x in done["lr"].unique())
    if lrs != sorted(paper["lr"]):
        out.append(f"lr {', '.join(f'{x:g}' for x in lrs)} (paper: the best of "
                   f"{', '.join(f'{x:g}' for x in paper['lr'])})")
    steps = sorted(int(x) for x in done["steps"].unique())
    if steps != [paper["steps"]]:
        out.append(f"{' / '.join(f'{x:,}' for x in steps)} steps (paper: {paper['steps']:,})")
    lengths = sorted({(int(n), int(m)) for n, m in zip(done["train_length"], done["max_length"])})
    if lengths != [(paper["train_length"], paper["max_length"])]:
        out.append(" / ".join(f"training lengths 1..{n}, test {n + 1}..{m}" for n, m in lengths) +
                   f" (paper: 1..{paper['train_length']}, test {paper['train_length'] + 1}..{paper['max_length']})")
    seeds = done["seed"].nunique()
    if seeds != paper["seeds"]:
        out.append(f"{count_noun(seeds, 'seed')} (paper: {paper['seeds']})")
    return out


def compare(table: pd.DataFrame, runs: pd.DataFrame | None = None) -> dict:
    """Measured beside published on the cells both have: the long table of cells (measured,
    published, difference), the paper's claims recomputed on both, and (given the runs) where
    their protocol differs from the paper's."""
    paper = published_table1().reindex(index=table.index, columns=table.columns)
    cells = []
    for task in table.index:
        for col in table.columns:
            m, p = table.loc[task, col], paper.loc[task, col]
            if pd.notna(m) and pd.notna(p):
                cells.append({"task": task, "encoding": col, "measured": m, "published": p, "difference": m - p})
    gain_m = randomized_gain(table)
    gain_p = randomized_gain(paper.where(table.notna()))
    wins = {}
    for col in table.columns:
        if col.startswith("r_") and col[2:] in table.columns:
            both = table[[col, col[2:]]].dropna()
            pub = paper[[col, col[2:]]].loc[both.index]
            wins[col[2:]] = {"measured": int((both[col] > both[col[2:]]).sum()),
                             "published": int((pub[col] > pub[col[2:]]).sum()), "tasks": len(both)}
    solved_m = {t: [c for c in table.columns if table.loc[t, c] > 90] for t in table.index}
    solved_p = {t: [c for c in table.columns if paper.loc[t, c] > 90] for t in table.index}
    return {
        "cells": pd.DataFrame(cells, columns=["task", "encoding", "measured", "published", "difference"]),
        "gain": pd.DataFrame({"measured": gain_m, "published": gain_p}),
        "mean_gain": {"measured": float(np.nanmean(gain_m)) if gain_m.notna().any() else None,
                      "published_same_cells": float(np.nanmean(gain_p)) if gain_p.notna().any() else None,
                      "published_paper": PAPER_AVERAGE_GAIN},
        "wins": wins, "solved": {"measured": solved_m, "published": solved_p},
        "protocol": None if runs is None else protocol_differences(runs),
    }
