"""`lengen report SWEEP --versus BASE` for a language-model sweep (`command: lm`): every other
variant of lm_table.md (its row labels, e.g. `RoPE, SSMax` or `RoPE + yarn:factor=8`) against
BASE, paired run by run at each evaluation length: a pair is one seed that both finished. Per
variant and length: the mean paired difference variant - BASE of the log perplexity (natural
log; of the accuracy for passkey / RULER sweeps), its 95% t interval over the seeds, and the
verdict the interval allows (lengen.reports.stats), with lower perplexity counted as a win. A
perplexity sweep also gets a `validation` column: the same pairing on each run's own validation
perplexity at the end of training (`val_ppl`: consecutive training-length windows of the
validation stream, most starting mid-document, where the length columns score documents from
their first byte), for the rows that are trained variants rather than evaluation-time methods."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lengen.errors import LengenError
from lengen.formatting import quoted_list
from lengen.reports import lm_aggregate as lm
from lengen.reports.lm import prepared
from lengen.reports.render import markdown_rows, md_escape
from lengen.reports.stats import paired


def _by_seed(lv: pd.DataFrame, variant: str, length: int, sign: float) -> dict:
    """{seed: value} of one variant at one length, `sign` x the value (so that higher is better)."""
    g = lv[(lv["variant"] == variant) & (lv["length"] == length)]
    return {s: sign * float(v) for s, v in zip(g["seed"], g["value"]) if np.isfinite(v)}


VALIDATION = "validation (end of training)"


def _validation_by_seed(runs: pd.DataFrame, group: str) -> dict:
    """{seed: -log val_ppl} of one trained variant's runs (negated: higher is better)."""
    g = runs[runs["group"] == group]
    return {s: -math.log(float(v)) for s, v in zip(g["seed"], g["val_ppl"]) if np.isfinite(v) and v > 0}


def lm_versus(runs: pd.DataFrame, values: pd.DataFrame, metric: str, base: str) -> pd.DataFrame:
    """One row per (variant, length) where the variant and `base` share a seed: variant, length
    (None for the validation perplexity at the end of training, in ppl sweeps),
    n (seeds paired), difference (variant - base, in the metric's unit: log ppl or accuracy),
    std, low, high (its 95% t interval), wins and losses (seeds where the variant is better /
    worse: lower log ppl, higher accuracy) and the verdict for the variant. An infinite
    perplexity has no difference: that seed is left out of the pair."""
    lv = lm.long_values(runs, values, metric)
    known = list(lm.variants(runs, values)["variant"])
    if base not in known:
        raise LengenError(f"--versus: no variant {base!r} in this sweep; its variants: {quoted_list(known)}")
    sign = -1.0 if metric == "ppl" else 1.0      # a win: lower perplexity, higher accuracy
    lengths = sorted(int(x) for x in lv["length"].unique())
    groups = lm.add_groups(runs)
    trained = set(groups["group"]) if metric == "ppl" and "val_ppl" in groups else set()
    rows = []
    for variant in known:
        if variant == base:
            continue
        for length in lengths:
            p = paired(_by_seed(lv, variant, length, sign), _by_seed(lv, base, length, sign))
            if p.difference.n:
                rows.append({"variant": variant, "length": length, **p.fields(sign)})
        if variant in trained and base in trained:   # a training-time variant against a trained base
            p = paired(_validation_by_seed(groups, variant), _validation_by_seed(groups, base))
            if p.difference.n:
                rows.append({"variant": variant, "length": None, **p.fields(sign)})
    if not rows:
        raise LengenError(f"--versus: no variant has a finished run at a seed where {base!r} has one")
    return pd.DataFrame(rows)


def lm_versus_markdown(table: pd.DataFrame, base: str, trained: list[int]) -> str:
    """Variants (rows) x lengths (columns); a cell: the mean difference from `base`, its 95%
    interval and the verdict ("not shown" with one seed)."""
    lengths = sorted(int(x) for x in table["length"].dropna().unique())
    columns = [*lengths, *([None] if table["length"].isna().any() else [])]

    def cell(r) -> str:
        if r is None:
            return "—"
        if r["n"] < 2 or math.isnan(r["low"]):
            return f"{r['difference']:+.3f} (n={r['n']}) not shown"
        return f"{r['difference']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}] {r['verdict']}"

    rows = []
    for variant, group in table.groupby("variant", sort=False):
        by = {None if pd.isna(r["length"]) else int(r["length"]): r for _, r in group.iterrows()}
        rows.append([variant, *(cell(by.get(n)) for n in columns)])
    header = ["variant", *(VALIDATION if n is None else lm.length_header(n, trained) for n in columns)]
    return markdown_rows(header, rows, escape=md_escape)


def lm_versus_text(data, base: str) -> str:
    """The --versus table of an LM sweep's data (lengen.reports.load.SweepData), as the command
    prints it and docs/ shows it."""
    runs, values, metric = prepared(data)
    return lm_versus_markdown(lm_versus(runs, values, metric, base), base, lm.train_lengths(runs))
