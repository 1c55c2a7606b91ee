"""lengen.hf.search (the search behind `lengen hf tune`) with synthetic objectives and a fake clock:
no model, no timing."""

import math

import numpy as np
import pytest

from lengen.hf.search import Space, neighbours, search, spaces_for


def factor_space(grid=(2.0, 3.0, 4.0), logn=False):
    return Space("yarn", {"factor": list(grid)}, {"factor": grid[0]}, logn=logn)


def bowl(optimum, counts=None):
    """NLL = 1 + (ln f - ln optimum)^2, the same for every sequence; counts calls per spec."""
    def objective(setting, i):
        if counts is not None:
            counts[setting.spec] = counts.get(setting.spec, 0) + 1
        return 1.0 + (math.log(setting.get("factor")) - math.log(optimum)) ** 2
    return objective


def test_refinement_finds_an_optimum_outside_and_between_the_grid_points():
    for optimum in (5.3, 2.6, 1.6):
        result = search([factor_space()], bowl(optimum), n_items=2, budget_s=1e9)
        grid_best = min(1 + (math.log(f) - math.log(optimum)) ** 2 for f in (2.0, 3.0, 4.0))  # by hand
        best = result.best(2)
        assert best.mean < grid_best - 1e-4                      # refinement beat the coarse grid
        assert best.setting.get("factor") == pytest.approx(optimum, rel=0.03)
        assert best.stage == "refine"
        # with refinement off, the coarse grid's best is the answer
        coarse = search([factor_space()], bowl(optimum), n_items=2, budget_s=1e9, refine=False).best(2)
        assert coarse.mean == pytest.approx(grid_best) and coarse.stage in ("grid", "default")


def test_integer_options_converge_to_the_optimum_of_a_two_option_bowl():
    space = Space("self_extend", {"group": [4, 8, 16], "window": [8, 16, 32]}, {"group": 8, "window": 16},
                  integer=("group", "window"), logn=False)

    def objective(setting, i):
        g, w = setting.get("group"), setting.get("window")
        return (math.log2(g) - math.log2(16)) ** 2 + (math.log(w) - math.log(12)) ** 2 + 0.01 * i

    best = search([space], objective, n_items=3, budget_s=1e9).best(3)
    assert (best.setting.get("group"), best.setting.get("window")) == (16, 12)
    assert best.spec == "self_extend:group=16,window=12"


def test_hopeless_settings_are_stopped_after_their_first_sequence():
    space = factor_space(grid=(2.0, 3.0, 4.0, 8.0))
    calls = {}

    def objective(setting, i):
        calls[setting.spec] = calls.get(setting.spec, 0) + 1
        f = setting.get("factor")
        # factor 8: 3 nats worse on every sequence (hopeless); 4: 0.3 worse (within the margin)
        return {2.0: 1.0, 3.0: 0.9, 4.0: 1.2, 8.0: 3.9}.get(f, 5.0) + 0.1 * i

    result = search([space], objective, n_items=4, budget_s=1e9, margin=0.5, refine=False)
    by_spec = {t.spec: t for t in result.trials}
    assert calls == {"yarn:factor=2": 4, "yarn:factor=3": 4, "yarn:factor=4": 4, "yarn:factor=8": 1}
    assert by_spec["yarn:factor=8"].status(4) == "stopped"
    assert by_spec["yarn:factor=4"].status(4) == "done"
    assert [t.spec for t in result.ranked(4)] == ["yarn:factor=3", "yarn:factor=2", "yarn:factor=4",
                                                   "yarn:factor=8"]


def test_the_default_setting_goes_first_and_is_marked():
    spaces = spaces_for(["rerope", "yarn"], 64, 256, logn=True)
    result = search(spaces, lambda s, i: 1.0, n_items=1, budget_s=1e9, refine=False)
    first = [t.spec for t in result.trials[:4]]
    assert first == ["rerope:window=16", "yarn:factor=4", "rerope:window=16+logn", "yarn:factor=4+logn"]
    assert [t.default for t in result.trials].count(True) == 4
    assert all(t.stage == "default" for t in result.trials[:4])


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_the_budget_is_respected_with_a_fake_clock():
    clock = FakeClock()
    calls = []

    def objective(setting, i):
        calls.append((setting.spec, i))
        clock.t += 10.0             # every sequence takes 10 "seconds"
        return 1.0

    result = search([factor_space()], objective, n_items=2, budget_s=45, clock=clock)
    # sequences start at t = 0, 10, 20, 30, 40; at t = 50 the budget (45 s) is spent
    assert len(calls) == 5 and result.calls == 5 and result.out_of_budget
    assert [t.status(2) for t in result.trials] == ["done", "done", "unfinished"]
    assert [s.spec for s in result.not_run] == []   # all three grid settings were started
    result = search([factor_space(grid=(2.0, 3.0, 4.0, 5.0))], objective, n_items=2, budget_s=25,
                    clock=clock)
    assert [s.spec for s in result.not_run] == ["yarn:factor=4", "yarn:factor=5"]
    assert [t.status(2) for t in result.trials] == ["done", "unfinished"]
    # the budget spent exactly when a setting would start: that setting is "not run", not unfinished
    result = search([factor_space(grid=(2.0, 3.0, 4.0))], objective, n_items=2, budget_s=20, clock=clock)
    assert [t.spec for t in result.trials] == ["yarn:factor=2"]
    assert [s.spec for s in result.not_run] == ["yarn:factor=3", "yarn:factor=4"]


def test_resume_never_calls_the_objective_again_and_gives_the_same_result():
    cache = {}
    counts = {}
    full = search([factor_space(logn=True)], bowl(5.3, counts), n_items=3, budget_s=1e9, cache=cache)
    assert sum(counts.values()) == full.calls > 0

    def refuse(setting, i):
        raise AssertionError(f"scored {setting.spec} #{i} again")

    again = search([factor_space(logn=True)], refuse, n_items=3, budget_s=1e9, cache=cache)
    assert again.calls == 0
    assert [(t.spec, t.nll, t.status(3)) for t in again.ranked(3)] == \
        [(t.spec, t.nll, t.status(3)) for t in full.ranked(3)]


def test_an_interrupted_search_resumed_with_more_budget_scores_each_sequence_once():
    reference = {}
    whole = search([factor_space()], bowl(5.3, reference), n_items=2, budget_s=1e9)
    clock, cache, counts = FakeClock(), {}, {}
    objective = bowl(5.3, counts)

    def timed(setting, i):
        clock.t += 1.0
        return objective(setting, i)

    first = search([factor_space()], timed, n_items=2, budget_s=3, clock=clock, cache=cache)
    assert first.out_of_budget and first.calls == 3
    # the same budget again: the cached sequences' seconds are spent already, nothing is scored
    same = search([factor_space()], timed, n_items=2, budget_s=3, clock=clock, cache=cache)
    assert same.out_of_budget and same.calls == 0
    assert [(t.spec, t.nll) for t in same.trials] == [(t.spec, t.nll) for t in first.trials]
    assert sum(counts.values()) == 3
    second = search([factor_space()], timed, n_items=2, budget_s=1e9, clock=clock, cache=cache)
    assert counts == reference                                   # nothing scored twice
    assert second.best(2).spec == whole.best(2).spec
    assert [t.spec for t in second.trials] == [t.spec for t in whole.trials]


def test_neighbours_are_geometric_midpoints_and_one_step_outward_at_an_edge():
    space = factor_space(grid=(2.0, 4.0, 8.0))
    tried = [space.setting({"factor": f}) for f in (2.0, 4.0, 8.0)]
    mid = neighbours(space, tried[1].replace("factor", 4.0), tried)
    assert sorted(s.get("factor") for s in mid) == [pytest.approx(math.sqrt(8), rel=1e-3),
                                                       pytest.approx(math.sqrt(32), rel=1e-3)]
    edge = neighbours(space, tried[2], tried)
    assert sorted(s.get("factor") for s in edge) == [pytest.approx(math.sqrt(32), rel=1e-3), 16.0]


def test_search_spaces_respect_each_methods_constraints():
    L0, L = 8192, 32768
    spaces = {sp.method: sp for sp in spaces_for(["self_extend", "dca", "rerope", "leaky_rerope", "yarn"], L0, L)}
    se = [dict(s.options) for s in spaces["self_extend"].coarse()]
    # capacity (L0 - w) g + w >= L for every setting, and the smallest feasible power of two is in
    for o in se:
        assert o["window"] + (L - o["window"]) / o["group"] <= L0
    for w in (1024, 2048, 4096):
        smallest = next(g for g in (1, 2, 4, 8, 16, 32, 64) if w + (L - w) / g <= L0)
        assert {"group": smallest, "window": w} in se
    assert spaces["self_extend"].defaults()[0].spec == "self_extend:group=8,window=2048"
    dca = [dict(s.options) for s in spaces["dca"].coarse()]
    assert all(o["local_size"] < o["chunk_size"] <= L0 - 1 for o in dca) and len(dca) == 2 * 9
    assert spaces["dca"].defaults()[0].spec == "dca:chunk_size=6144,local_size=1024"
    assert [s.spec for s in spaces["rerope"].coarse() if not s.logn] == [
        f"rerope:window={w}" for w in (1024, 2048, 4096, 6144)]
    assert all(o["window"] + (L - o["window"]) / o["factor"] <= L0
               for o in (dict(s.options) for s in spaces["leaky_rerope"].coarse()))
    assert [s.spec for s in spaces["yarn"].coarse()] == [
        "yarn:factor=4", "yarn:factor=4+logn", "yarn:factor=6", "yarn:factor=6+logn", "yarn:factor=8",
        "yarn:factor=8+logn"]
    # every spec string builds (the options exist and are in range)
    from lengen.extrapolation import RopeSpec, build_method
    for sp in spaces.values():
        for s in sp.coarse() + sp.defaults():
            build_method(s.spec, RopeSpec(rotary_dim=64, train_length=L0))


def test_slices_never_share_tokens_and_share_documents_only_when_the_text_has_too_few():
    from lengen.hf.tune_slices import pieces, split_slices

    rng = np.random.default_rng(0)
    docs = [rng.integers(2, 50, n) for n in (300, 250, 40, 50, 30)]
    ps = pieces(docs, 100, eos=1)
    # doc 0: 3 pieces, doc 1: 2, then docs 2-4 (40 + 50 + 30 + 3 EOS >= 100) joined into one
    assert [(p.docs, p.start) for p in ps] == [((0,), 0), ((0,), 100), ((0,), 200), ((1,), 0), ((1,), 100),
                                               ((2, 3, 4), 0)]
    assert ps[5].tokens.tolist() == docs[2].tolist() + [1] + docs[3].tolist() + [1] + docs[4][:8].tolist()
    tune, ev = split_slices(ps, 2, 3)
    assert [p.docs for p in tune] == [(0,), (0,)]
    assert [p.docs for p in ev] == [(1,), (1,), (2, 3, 4)]            # other documents first
    assert not {d for p in tune for d in p.docs} & {d for p in ev for d in p.docs}
    # a single long document: the evaluation slice is other tokens of it
    one = pieces([np.arange(1000)], 100, eos=1)
    tune, ev = split_slices(one, 2, 2)
    spans = [(p.start, p.start + len(p.tokens)) for p in tune + ev]
    assert spans == [(0, 100), (100, 200), (200, 300), (300, 400)]


def test_refinement_of_an_ever_improving_option_stops_at_its_bound():
    # a larger factor is always better: the search climbs outward and stops at 4 s (s = 4 here)
    space = spaces_for(["yarn"], 64, 256, logn=False)[0]
    result = search([space], lambda s, i: -math.log(s.get("factor")), n_items=1, budget_s=1e9)
    assert result.best(1).setting.get("factor") <= 16 and not result.out_of_budget
    assert max(t.setting.get("factor") for t in result.trials) <= 16
