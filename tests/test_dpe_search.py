"""DPE's per-group scale search in lengen.hf.search (`lengen hf tune --methods dpe`), driven by
synthetic objectives and a fake clock: no model, no timing. The expected grids, orders and vectors
are written out by hand from the authors' procedure (one group at a time, the others at 2 L / L0)."""

import math

import pytest

from lengen.extrapolation import METHODS, RopeSpec, build_method
from lengen.hf.search import dpe_space, search, spaces_for


def planted(optimum, calls=None):
    """NLL = 1 + sum_g (log2 s_g - log2 s*_g)^2 (+ 0.01 i on sequence i): separable, noise-free,
    minimal exactly at `optimum`; `calls` logs (spec, i)."""
    def objective(setting, i):
        if calls is not None:
            calls.append((setting.spec, i))
        scales = setting.get("scales")
        return 1.0 + sum((math.log2(s) - math.log2(o)) ** 2 for s, o in zip(scales, optimum)) + 0.01 * i
    return objective


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_grid_window_base_and_cost_follow_the_authors_rule():
    # 8k -> 16k: W = 1024, base 2 x 16k / 8k = 4, scales 16k / l for l = 16k .. 1k: 1 .. 16
    sp = dpe_space(8192, 16384)
    assert sp.grid == {"scales": [1, 2, 4, 8, 16], "window": [1024]} and sp.base == 4
    assert [s.spec for s in sp.defaults()] == ["dpe:scales=4-4-4-4-4-4-4-4,window=1024"]
    assert len(sp.coarse()) == 8 * 4 + 1          # 8 groups x 5 candidates, the all-4 vector once
    # 8k -> 32k: base 8, scales 1 .. 32; the authors' 8k -> 128k: base 32, scales 1 .. 128 (8 of them)
    assert (dpe_space(8192, 32768).grid["scales"], dpe_space(8192, 32768).base) == ([1, 2, 4, 8, 16, 32], 8)
    assert len(dpe_space(8192, 32768).coarse()) == 8 * 5 + 1
    assert (dpe_space(8192, 131072).grid["scales"], dpe_space(8192, 131072).base) == (
        [1, 2, 4, 8, 16, 32, 64, 128], 32)
    # past 8 candidates the smallest scales go: 256k keeps 2 .. 256, 1M keeps 8 .. 1024
    assert dpe_space(8192, 262144).grid["scales"] == [2, 4, 8, 16, 32, 64, 128, 256]
    assert dpe_space(8192, 1 << 20).grid["scales"] == [8, 16, 32, 64, 128, 256, 512, 1024]
    # 2 L / L0 = 3 at 12k: rounded up to 4; L / W = 12: scales up to 8
    assert (dpe_space(8192, 12288).grid["scales"], dpe_space(8192, 12288).base) == ([1, 2, 4, 8], 4)
    # no +logn variants even when the other methods get them
    assert all(not s.logn for s in spaces_for(["dpe"], 8192, 16384, logn=True)[0].coarse())


def test_a_length_exactly_a_power_of_two_times_the_window_includes_that_scale():
    assert dpe_space(64, 128).grid["scales"] == [1, 2, 4, 8, 16]      # L / W = 128 / 8 = 16: 16 is in
    assert dpe_space(64, 120).grid["scales"] == [1, 2, 4, 8]          # 120 / 8 = 15: 16 is not
    assert dpe_space(64, 136).grid["scales"] == [1, 2, 4, 8, 16]      # 136 / 8 = 17


def test_the_order_is_one_group_at_a_time_with_the_others_at_the_base_then_the_assembled_vector():
    calls = []
    sp = dpe_space(64, 128, groups=2)          # W = 8, base 4, scales 1 .. 16
    result = search([sp], planted((16, 2), calls), n_items=1, budget_s=1e9)
    assert [spec for spec, _ in calls] == [
        "dpe:scales=4-4,window=8",                                    # the default: every group at the base
        "dpe:scales=1-4,window=8", "dpe:scales=2-4,window=8",          # group 0, group 1 at 4
        "dpe:scales=8-4,window=8", "dpe:scales=16-4,window=8",
        "dpe:scales=4-1,window=8", "dpe:scales=4-2,window=8",          # group 1, group 0 at 4
        "dpe:scales=4-8,window=8", "dpe:scales=4-16,window=8",
        "dpe:scales=16-2,window=8",                                   # each group's best
        "dpe:scales=8-2,window=8", "dpe:scales=16-1,window=8",         # refinement: halved, doubled (32 > 16)
    ]
    assert [t.stage for t in result.trials] == ["default"] + ["grid"] * 8 + ["assemble"] + ["refine"] * 2
    assert result.best(1).spec == "dpe:scales=16-2,window=8" and not result.out_of_budget


def test_a_planted_separable_optimum_is_found_exactly_despite_early_stopping():
    # 8k -> 32k: base 8. Group 0's optimum (1) gains 9 nats over the base; group 1's (16) only 1:
    # held against the best finished setting of the whole search, 16 would be stopped (8 nats worse
    # than "1-8-8-..." by then) and group 1 would keep the base
    optimum = (1, 16, 32, 2, 4, 8, 32, 2)
    calls = []
    result = search(spaces_for(["dpe"], 8192, 32768), planted(optimum, calls), n_items=2, budget_s=1e9,
                    margin=0.5)
    best = result.best(2)
    assert best.spec == "dpe:scales=1-16-32-2-4-8-32-2,window=1024" and best.stage == "assemble"
    assert best.mean == 1.005                                         # exact: every term 0
    by_spec = {t.spec: t for t in result.trials}
    assert by_spec["dpe:scales=8-16-8-8-8-8-8-8,window=1024"].status(2) == "done"
    # a hopeless candidate of its own group is stopped: group 0 at 32 is 25 nats behind group 0 at 1
    assert by_spec["dpe:scales=32-8-8-8-8-8-8-8,window=1024"].status(2) == "stopped"
    # refinement tried the 16 neighbours (halved, doubled within 1 .. 32), none better
    refined = [t for t in result.trials if t.stage == "refine"]
    assert len(refined) == 16 - 3          # group 0 at 1 cannot halve, groups 2 and 6 at 32 cannot double
    assert all(t.mean > best.mean for t in refined)
    # the authors' procedure alone (no refinement): the same vector
    alone = search(spaces_for(["dpe"], 8192, 32768), planted(optimum), n_items=2, budget_s=1e9, refine=False)
    assert alone.best(2).spec == best.spec
    assert len(alone.trials) == 8 * 5 + 1 + 2     # the assembled vector, and it with +logn
    assert [t.spec for t in alone.trials if t.stage == "assemble"] == [best.spec, best.spec + "+logn"]


def test_the_assembled_vector_with_logn_can_win_and_refinement_keeps_its_logn():
    """+logn is tried on the assembled vector only (the sweep has none); when it is better, the
    refinement round halves and doubles its scales with +logn kept. --no-logn: not tried at all."""
    def objective(setting, i):
        return planted((16, 2))(setting, i) - (0.25 if setting.logn else 0.0)

    result = search([dpe_space(64, 128, groups=2, logn=True)], objective, n_items=1, budget_s=1e9)
    assert [t.spec for t in result.trials if t.setting.logn] == [
        "dpe:scales=16-2,window=8+logn", "dpe:scales=8-2,window=8+logn", "dpe:scales=16-1,window=8+logn",
        "dpe:scales=16-4,window=8+logn"]   # 16-4 without log-n was in the sweep; with it, not
    assert result.best(1).spec == "dpe:scales=16-2,window=8+logn" and result.best(1).mean == 0.75
    plain = search([dpe_space(64, 128, groups=2)], objective, n_items=1, budget_s=1e9)
    assert not any(t.setting.logn for t in plain.trials)
    for logn in (False, True):   # the tune's --no-logn reaches the space
        best = search(spaces_for(["dpe"], 64, 128, logn=logn), objective, n_items=1, budget_s=1e9).best(1)
        assert best.spec == "dpe:scales=16-2-4-4-4-4-4-4,window=8" + ("+logn" if logn else "")


def test_a_budget_cut_resumes_without_scoring_again():
    sp = dpe_space(64, 128, groups=2)
    whole_calls = []
    whole = search([sp], planted((16, 2), whole_calls), n_items=1, budget_s=1e9)
    clock, cache, calls = FakeClock(), {}, []
    objective = planted((16, 2), calls)

    def timed(setting, i):
        clock.t += 1.0
        return objective(setting, i)

    # 9 seconds: the default and the 8 sweep settings, then the budget is spent before the assembled
    # vector starts: it is not built from part of the grid and not scored
    first = search([sp], timed, n_items=1, budget_s=9, clock=clock, cache=cache)
    assert first.out_of_budget and first.calls == 9 and len(cache) == 9
    assert "dpe:scales=16-2,window=8" not in cache
    # the same budget again scores nothing (the cached seconds are spent already)
    again = search([sp], timed, n_items=1, budget_s=9, clock=clock, cache=cache)
    assert again.out_of_budget and again.calls == 0
    # a larger budget goes on: the assembled vector and refinement, nothing scored twice
    more = search([sp], timed, n_items=1, budget_s=1e9, clock=clock, cache=cache)
    assert more.calls == 3 and not more.out_of_budget
    assert sorted(calls) == sorted(whole_calls)
    assert [t.spec for t in more.trials] == [t.spec for t in whole.trials]
    assert more.best(1).spec == whole.best(1).spec == "dpe:scales=16-2,window=8"


def test_dpe_runs_beside_other_methods_and_each_keeps_its_own_grid():
    sp = spaces_for(["dpe", "rerope"], 64, 128, logn=False)

    def objective(setting, i):
        if setting.method == "rerope":
            return 0.9              # far better than any dpe sweep setting: it must not stop them
        return planted((16, 1, 4, 4, 2, 4, 4, 8))(setting, i)

    result = search(sp, objective, n_items=2, budget_s=1e9, refine=False)
    assert result.best(2, "dpe").spec == "dpe:scales=16-1-4-4-2-4-4-8,window=8"
    assert result.best(2).setting.method == "rerope"
    stages = [t.stage for t in result.trials]
    assert stages.index("assemble") > max(i for i, s in enumerate(stages) if s == "grid")


@pytest.mark.skipif("dpe" not in METHODS, reason="the dpe method is not in lengen.extrapolation.METHODS on this branch")
def test_every_spec_the_search_writes_builds():
    # SmolLM2-135M's rotary dim (64: 32 pairs, 4 a group), 8k -> 32k; top-k from the method's default
    sp = dpe_space(8192, 32768)
    tried = sp.coarse()
    for s in tried + sp.assembled([], 1) + sp.around(tried[0], tried):
        build_method(s.spec, RopeSpec(rotary_dim=64, train_length=8192))
