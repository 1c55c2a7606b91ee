"""Statistics over seeds (lengen.reports.stats) against hand-worked examples: the sample std
(ddof 1) and the 95% t interval, and the paired comparison of two variants."""

import math

import pytest

from lengen.reports.stats import paired, summarize


def test_summary_by_hand():
    # 1..5: mean 3; squared deviations 4+1+0+1+4 = 10, / (n-1) = 2.5, std = 1.5811;
    # se = 1.5811 / sqrt(5) = 0.70711; t(0.975, 4) = 2.77645 (printed tables); half-width 1.96324
    s = summarize([1, 2, 3, 4, 5])
    assert (s.n, s.mean) == (5, 3.0)
    assert s.std == pytest.approx(1.58114, abs=1e-5)  # ddof 0 would give 1.41421
    assert (s.low, s.high) == (pytest.approx(1.03676, abs=1e-4), pytest.approx(4.96324, abs=1e-4))


def test_two_values_use_t_with_one_degree_of_freedom():
    # 10, 14: mean 12, std sqrt(8) = 2.8284, se = 2; t(0.975, 1) = 12.7062 -> 12 +- 25.41
    s = summarize([10.0, 14.0])
    assert s.std == pytest.approx(2.82843, abs=1e-5)
    assert (s.low, s.high) == (pytest.approx(12 - 25.4124, abs=1e-3), pytest.approx(12 + 25.4124, abs=1e-3))


def test_one_value_and_missing_values():
    s = summarize([7.0, float("nan"), None])
    assert (s.n, s.mean) == (1, 7.0) and math.isnan(s.std) and math.isnan(s.low)
    assert summarize([]).n == 0


def test_paired_comparison_by_hand():
    # cells matched by key; c only in a is left out. differences 2, 3, 4 -> mean 3, std 1,
    # se 0.57735, t(0.975, 2) = 4.30265 -> [0.5159, 5.4841]: above 0, "wins"
    a = {("t", 1): 12.0, ("t", 2): 13.0, ("u", 1): 14.0, ("c", 9): 0.0}
    b = {("t", 1): 10.0, ("t", 2): 10.0, ("u", 1): 10.0}
    p = paired(a, b)
    assert (p.difference.n, p.difference.mean, p.a_wins, p.b_wins, p.ties) == (3, 3.0, 3, 0, 0)
    assert p.difference.low == pytest.approx(0.51590, abs=1e-4)
    assert p.verdict == "wins"
    assert paired(b, a).verdict == "loses"
    # differences +1, -1, +2: the interval holds 0
    mixed = paired({1: 5.0, 2: 5.0, 3: 6.0}, {1: 4.0, 2: 6.0, 3: 4.0})
    assert (mixed.a_wins, mixed.b_wins, mixed.verdict) == (2, 1, "within noise")
    assert paired({1: 2.0}, {1: 1.0}).verdict == "not shown"
