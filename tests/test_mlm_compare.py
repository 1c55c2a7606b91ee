"""Paired comparisons of a masked-LM sweep's rows (lengen.reports.mlm_compare) on hand-made runs:
every expected difference and interval is worked out here from the accuracies, with scipy's t."""

import math

import pandas as pd
import pytest
from scipy import stats as scipy_stats

from lengen.errors import LengenError
from lengen.reports.mlm_compare import hypotheses_markdown, mlm_versus, row_name, su_hypotheses, versus_markdown

#: accuracy at 512 (64 is 0.5 everywhere), by (positions, test mode, log-n) and seed 0, 1, 2
ACC = {
    ("standard", "standard", False): [0.40, 0.42, 0.44],
    ("standard", "standard", True): [0.41, 0.44, 0.45],     # gains 1, 2, 1 points
    ("randomized", "random", False): [0.30, 0.35, 0.31],
    ("randomized", "random", True): [0.33, 0.39, 0.34],     # gains 3, 4, 3
    ("randomized", "uniform", False): [0.36, 0.37, 0.36],
    ("randomized", "uniform", True): [0.38, 0.40, 0.37],
    ("equal_mean", "standard", False): [0.48, 0.49, 0.50],
    ("equal_mean", "standard", True): [0.50, 0.51, 0.52],
}
METHOD = {("standard", False): "standard", ("standard", True): "standard+logn", ("random", False): "random",
          ("random", True): "random+logn", ("uniform", False): "uniform", ("uniform", True): "uniform+logn"}


def hand_runs() -> pd.DataFrame:
    return pd.DataFrame([{"run_id": f"{p}{s}", "positions": p, "seed": s, "lr": 1e-3, "train_length": 64,
                          "done": True} for p in ("standard", "randomized", "equal_mean") for s in range(3)])


def hand_values(acc=ACC) -> pd.DataFrame:
    rows = []
    for (p, mode, log_n), accs in acc.items():
        for s, a in enumerate(accs):
            for length, value in ((64, 0.5), (512, a)):
                rows.append({"run_id": f"{p}{s}", "method": METHOD[(mode, log_n)], "test_positions": mode,
                             "log_n": log_n, "length": length, "accuracy": value, "bpb": 2.0, "nll": 1.4,
                             "acc_first": value, "acc_last_half": value})
    return pd.DataFrame(rows)


def t_interval(diffs):
    n = len(diffs)
    mean = sum(diffs) / n
    std = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = scipy_stats.t.ppf(0.975, n - 1) * std / math.sqrt(n)
    return mean, mean - half, mean + half


def points(key):
    return [100 * a for a in ACC[key]]


def test_versus_pairs_rows_by_seed_at_each_length():
    base = row_name("standard", "standard", False)
    t = mlm_versus(hand_runs(), hand_values(), base).set_index(["row", "length"])
    rand = t.loc[(row_name("randomized", "random", False), 512)]
    diffs = [a - b for a, b in zip(points(("randomized", "random", False)), points(("standard", "standard", False)))]
    mean, low, high = t_interval(diffs)        # -10, -7, -13: all below 0
    assert rand["difference"] == pytest.approx(mean) and (rand["low"], rand["high"]) == (pytest.approx(low),
                                                                                          pytest.approx(high))
    assert (rand["wins"], rand["losses"], rand["verdict"]) == (0, 3, "loses")
    assert t.loc[(row_name("randomized", "random", False), 64), "difference"] == 0.0   # equal at 64
    md = versus_markdown(t.reset_index())
    assert md.splitlines()[0] == "| row | acc@64 | acc@512 |"
    with pytest.raises(LengenError, match="no row 'std' in this masked-LM sweep; its rows: 'standard; test standard; log-n off' \\| "):
        mlm_versus(hand_runs(), hand_values(), "std")


def test_su_hypotheses_by_hand():
    h = su_hypotheses(hand_runs(), hand_values())
    by = {(r.hypothesis, r.row): r for r in h.itertuples(index=False)}
    # H1, standard: on - off = +1, +2, +1 points
    h1 = by[("H1", row_name("standard", "standard", True) + " vs log-n off")]
    mean, low, high = t_interval([1.0, 2.0, 1.0])
    assert (h1.difference, h1.low, h1.high) == (pytest.approx(mean), pytest.approx(low), pytest.approx(high))
    # 4/3 ± 4.30 x 0.577 / sqrt(3) = [-0.10, +2.77]: the interval holds 0
    assert h1.claim == "within noise" and h1.n == 3
    # H2 with random test positions: randomized below standard in every seed
    h2 = by[("H2", f"{row_name('randomized', 'random', False)} vs {row_name('standard', 'standard', False)}")]
    assert h2.claim == "the opposite holds"
    # H4: the randomized gain (3, 4, 3) minus the standard gain (1, 2, 1) = 2, 2, 2
    h4 = by[("H4", "log-n gain of randomized; test random vs of standard; test standard")]
    mean, low, high = t_interval([2.0, 2.0, 2.0])
    assert (h4.difference, h4.low, h4.high) == (pytest.approx(mean), pytest.approx(low), pytest.approx(high))
    assert h4.claim == "holds"
    # H3 with log-n off: uniform - random = +6, +2, +5
    h3 = by[("H3", f"{row_name('randomized', 'uniform', False)} vs {row_name('randomized', 'random', False)}")]
    assert h3.difference == pytest.approx(13 / 3)
    # H5: equal-mean + log-n against each of the 7 other rows
    assert sum(1 for k in by if k[0] == "H5") == 7
    md = hypotheses_markdown(h)
    assert md.splitlines()[0] == "| H | comparison (claim: the first is better) | acc@512 difference, points | Su's claim |"


def test_one_seed_is_not_shown():
    values = hand_values()
    values = values[~values["run_id"].isin(["randomized1", "randomized2"])]
    h = su_hypotheses(hand_runs(), values)
    h3 = h[h["hypothesis"] == "H3"].iloc[0]
    assert (h3["n"], h3["claim"]) == (1, "not shown")
