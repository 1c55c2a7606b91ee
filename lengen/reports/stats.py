"""Statistics over seeds, as the reports and docs state them.

A mean over seeds comes with n, the sample standard deviation (ddof 1) and a 95% confidence
interval from Student's t: mean +- t(0.975, n - 1) * std / sqrt(n). With 3-5 seeds a bootstrap over
seeds is too narrow (it cannot see spread the few seeds did not show), so the t interval it is.
A comparison of two variants pairs their cells (same task, learning rate and seed, or whatever
the caller matches on), and summarizes the paired differences the same way; its words follow the
interval: "wins" when the interval lies above 0, "loses" when below, "within noise" otherwise, and
"not shown" with fewer than two pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

LEVEL = 0.95


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    std: float    # ddof 1; nan for n < 2
    low: float    # the 95% t interval; nan for n < 2
    high: float

    def __str__(self) -> str:
        if self.n < 2:
            return f"{self.mean:.1f} (n={self.n})"
        return f"{self.mean:.1f} ± {self.std:.1f} [{self.low:.1f}, {self.high:.1f}] (n={self.n})"


def summarize(values) -> Summary:
    """n, mean, sample std and 95% t interval of `values` (NaNs dropped)."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    n = len(x)
    if n == 0:
        return Summary(0, math.nan, math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if n < 2:
        return Summary(1, mean, math.nan, math.nan, math.nan)
    std = float(x.std(ddof=1))
    half = float(student_t.ppf(0.5 + LEVEL / 2, n - 1)) * std / math.sqrt(n)
    return Summary(n, mean, std, mean - half, mean + half)


@dataclass(frozen=True)
class Paired:
    difference: Summary  # of a - b over the matched cells
    a_wins: int          # cells where a > b
    b_wins: int
    ties: int

    @property
    def verdict(self) -> str:
        d = self.difference
        if d.n < 2:
            return "not shown"
        if d.low > 0:
            return "wins"
        if d.high < 0:
            return "loses"
        return "within noise"

    def fields(self, sign: float = 1.0) -> dict:
        """n, difference, std, low, high, wins, losses, verdict as the comparison tables hold
        them; `sign` -1 reports a difference compared as higher-is-better (e.g. -log ppl) back in
        its own direction (the interval flipped, wins and the verdict unchanged)."""
        d = self.difference
        low, high = sorted((sign * d.low + 0.0, sign * d.high + 0.0))   # + 0.0: no -0.0 in a table
        return {"n": d.n, "difference": sign * d.mean + 0.0, "std": d.std, "low": low, "high": high,
                "wins": self.a_wins, "losses": self.b_wins, "verdict": self.verdict}


def paired(a: dict, b: dict) -> Paired:
    """The paired difference a - b over the keys both have (cells: e.g. (task, lr, seed))."""
    keys = [k for k in a if k in b]
    diffs = [a[k] - b[k] for k in keys]
    return Paired(summarize(diffs), sum(d > 0 for d in diffs), sum(d < 0 for d in diffs),
                  sum(d == 0 for d in diffs))


def wilson(correct: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The Wilson score interval of a proportion correct / n (an accuracy over n prompts): unlike
    p +- z sqrt(p(1-p)/n) it stays within [0, 1] and is not empty at 0 or n correct."""
    if n < 1:
        return math.nan, math.nan
    z = float(norm.ppf(0.5 + level / 2))
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
