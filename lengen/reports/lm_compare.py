"""`lengen report SWEEP --versus BASE` for a language-model sweep (`command: lm`): every other
variant of lm_table.md (its row labels, e.g. `RoPE, SSMax` or `RoPE + yarn:factor=8`) against
BASE, paired run by run at each evaluation length: a pair is one seed that both finished. Per
variant and length: the mean paired difference variant - BASE of the log perplexity (natural
log; of the accuracy for passkey / RULER sweeps), its 95% t interval over the seeds, and the
verdict the interval allows (lengen.reports.stats), with lower perplexity counted as a win."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lengen.errors import LengenError
from lengen.reports import lm_aggregate as lm
from lengen.reports.lm import prepared
from lengen.reports.render import markdown_rows
from lengen.reports.stats import paired


def _by_seed(lv: pd.DataFrame, variant: str, length: int, sign: float) -> dict:
    """{seed: value} of one variant at one length, `sign` x the value (so that higher is better)."""
    g = lv[(lv["variant"] == variant) & (lv["length"] == length)]
    return {s: sign * float(v) for s, v in zip(g["seed"], g["value"]) if np.isfinite(v)}


def lm_versus(runs: pd.DataFrame, values: pd.DataFrame, metric: str, base: str) -> pd.DataFrame:
    """One row per (variant, length) where the variant and `base` share a seed: variant, length,
    n (seeds paired), difference (variant - base, in the metric's unit: log ppl or accuracy),
    std, low, high (its 95% t interval), wins and losses (seeds where the variant is better /
    worse: lower log ppl, higher accuracy) and the verdict for the variant. An infinite
    perplexity has no difference: that seed is left out of the pair."""
    lv = lm.long_values(runs, values, metric)
    known = list(lm.variants(runs, values)["variant"])
    if base not in known:
        raise LengenError(f"--versus: no variant {base!r} in this sweep; its variants: {', '.join(known)}")
    sign = -1.0 if metric == "ppl" else 1.0      # a win: lower perplexity, higher accuracy
    lengths = sorted(int(x) for x in lv["length"].unique())
    rows = []
    for variant in known:
        if variant == base:
            continue
        for length in lengths:
            p = paired(_by_seed(lv, variant, length, sign), _by_seed(lv, base, length, sign))
            d = p.difference
            if d.n == 0:
                continue
            low, high = sorted((sign * d.low, sign * d.high))   # back to the metric's own direction
            rows.append({"variant": variant, "length": length, "n": d.n, "difference": sign * d.mean,
                         "std": d.std, "low": low, "high": high,
                         "wins": p.a_wins, "losses": p.b_wins, "verdict": p.verdict})
    if not rows:
        raise LengenError(f"--versus: no variant has a finished run at a seed where {base!r} has one")
    return pd.DataFrame(rows)


def lm_versus_markdown(table: pd.DataFrame, base: str, trained: list[int]) -> str:
    """Variants (rows) x lengths (columns); a cell: the mean difference from `base`, its 95%
    interval and the verdict ("not shown" with one seed)."""
    lengths = sorted(int(x) for x in table["length"].unique())

    def cell(r) -> str:
        if r is None:
            return "—"
        if r["n"] < 2 or math.isnan(r["low"]):
            return f"{r['difference']:+.3f} (n={r['n']}) not shown"
        return f"{r['difference']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}] {r['verdict']}"

    rows = []
    for variant, group in table.groupby("variant", sort=False):
        by = {int(r["length"]): r for _, r in group.iterrows()}
        rows.append([variant, *(cell(by.get(n)) for n in lengths)])
    header = ["variant", *(lm.length_header(n, trained) for n in lengths)]
    return markdown_rows(header, rows, escape=lambda s: s.replace("|", "\\|").replace("*", "\\*"))


def lm_versus_text(data, base: str) -> str:
    """The --versus table of an LM sweep's data (lengen.reports.load.SweepData), as the command
    prints it and docs/ shows it."""
    runs, values, metric = prepared(data)
    return lm_versus_markdown(lm_versus(runs, values, metric, base), base, lm.train_lengths(runs))
