"""The search behind `lengen hf tune`, as a pure function: settings to try (per-method search
spaces built from L0, the trained length, and L, the target length) and an objective callback
objective(setting, i) -> mean NLL of tune sequence i. No model, no files, no clock of its own,
so tests drive it with a synthetic objective and a fake clock.

Order of evaluation (every step round-robin over the methods, so a short budget still sees each):
  1. each method's documented default (with and without +logn),
  2. the coarse grid (for dpe, its authors' sweep: one frequency group at a time, the others fixed),
  3. settings built from the grid's scores, with or without refinement (dpe: the vector of each
     group's best scale, and that vector with +logn),
  4. refinement rounds: around each method's best finished setting, for one numeric option at a
     time, the geometric midpoints sqrt(v * n) between its value v and the nearest values n tried
     below and above (at the edge of what was tried, one step outward instead, v^2 / n). A method
     keeps refining while a round improves its best; integer options stop when midpoints round
     onto values already tried (dpe: each group's scale halved and doubled, see DpeSpace).
Early stopping: a setting is scored sequence by sequence; after sequence i (before its last) it
is dropped (status "stopped") when its mean NLL over sequences 0..i exceeds the best finished
setting's mean over the same sequences by more than `margin` nats (Space.rivals: for a setting of
dpe's sweep, the best finished setting of its own group's sweep).
Budget: before every sequence, if `budget_s` seconds of search have passed, the search ends with
what it has (a setting cut short is "unfinished"). Settings found in `cache` are not scored again,
but the seconds they took when scored count against the budget: rerunning with the same budget
stops where the first run stopped (nothing scored), a larger budget goes on from there. Newly
scored sequences go to the cache with their NLL and seconds."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Callable

DEFAULT, GRID, ASSEMBLE, REFINE = "default", "grid", "assemble", "refine"


def _round(value, integer: bool):
    """Integers for sizes; factors to 4 significant digits, so a spec string reads back the same;
    a tuple (a vector option) element by element."""
    if isinstance(value, tuple):
        return tuple(_round(v, integer) for v in value)
    return max(1, int(round(value))) if integer else float(f"{value:.4g}")


def _fmt(value) -> str:
    if isinstance(value, tuple):   # a vector option: dpe's scales=4-4-2-16
        return "-".join(map(_fmt, value))
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Setting:
    method: str
    options: tuple = ()           # ((option, value), ...) in the space's option order
    logn: bool = False

    @property
    def spec(self) -> str:
        opts = ",".join(f"{k}={_fmt(v)}" for k, v in self.options)
        return self.method + (f":{opts}" if opts else "") + ("+logn" if self.logn else "")

    def get(self, option: str):
        return dict(self.options)[option]

    def replace(self, option: str, value) -> "Setting":
        return Setting(self.method, tuple((k, value if k == option else v) for k, v in self.options), self.logn)


@dataclass
class Space:
    """One method's search space: the coarse grid (option -> values), its documented default and
    which combinations are allowed."""
    method: str
    grid: dict
    default: dict
    integer: tuple = ()
    valid: Callable[[dict], bool] = lambda options: True
    logn: bool = True                 # also try every setting with +logn

    def setting(self, options: dict, logn: bool = False) -> Setting:
        return Setting(self.method, tuple((k, _round(options[k], k in self.integer)) for k in self.grid), logn)

    def variants(self, options: dict) -> list[Setting]:
        return [self.setting(options, logn) for logn in ((False, True) if self.logn else (False,))]

    def defaults(self) -> list[Setting]:
        return self.variants(self.default)

    def coarse(self) -> list[Setting]:
        names = list(self.grid)
        combos = [dict(zip(names, values)) for values in itertools.product(*self.grid.values())]
        return list(dict.fromkeys(s for c in combos if self.valid(c) for s in self.variants(c)))

    def assembled(self, trials: list["Trial"], n_items: int) -> list[Setting]:
        """Settings built from the scores of the coarse grid, tried after it (with or without
        refinement); a grid space has none."""
        return []

    def around(self, best: Setting, tried: list[Setting]) -> list[Setting]:
        """Refinement candidates around the method's best setting."""
        return neighbours(self, best, tried)

    def rivals(self, setting: Setting, other: Setting) -> bool:
        """Whether early stopping holds `setting` against the finished `other`: here any setting,
        so the bar is the best finished setting of the whole search."""
        return True


@dataclass
class Trial:
    setting: Setting
    stage: str
    default: bool
    nll: list = field(default_factory=list)    # mean NLL of each tune sequence, in order
    stopped: bool = False
    seconds: list = field(default_factory=list)  # search time each sequence took (overheads included)

    @property
    def spec(self) -> str:
        return self.setting.spec

    @property
    def mean(self) -> float:
        return sum(self.nll) / len(self.nll) if self.nll else math.inf

    def status(self, n_items: int) -> str:
        return "stopped" if self.stopped else "done" if len(self.nll) >= n_items else "unfinished"


@dataclass
class SearchResult:
    trials: list            # every setting started, in the order first tried
    not_run: list           # settings of the coarse grid never started (the budget ran out)
    out_of_budget: bool
    calls: int              # objective calls this run (cached sequences excluded)

    def ranked(self, n_items: int) -> list[Trial]:
        """Finished settings by mean NLL, then the stopped and unfinished by their partial mean."""
        return sorted(self.trials, key=lambda t: (t.status(n_items) != "done", t.mean))

    def best(self, n_items: int, method: str | None = None) -> Trial | None:
        done = [t for t in self.trials if t.status(n_items) == "done" and method in (None, t.setting.method)]
        return min(done, key=lambda t: t.mean, default=None)


def _interleave(lists):
    return [x for group in itertools.zip_longest(*lists) for x in group if x is not None]


def neighbours(space: Space, best: Setting, tried: list[Setting]) -> list[Setting]:
    """Refinement candidates around `best`: per numeric option, geometric midpoints to the nearest
    values tried below and above (one step outward at an edge), the other options kept."""
    out = []
    for option in space.grid:
        v = best.get(option)
        seen = sorted({s.get(option) for s in tried if s.method == space.method} | set(space.grid[option]))
        below, above = [x for x in seen if x < v], [x for x in seen if x > v]
        lo, hi = (below[-1] if below else None), (above[0] if above else None)
        targets = [math.sqrt(lo * v) if lo else v * v / hi if hi else None,
                   math.sqrt(v * hi) if hi else v * v / lo if lo else None]
        for t in targets:
            if t is None or t <= 0:
                continue
            value = _round(t, option in space.integer)
            candidate = best.replace(option, value)
            if value != v and value not in seen and space.valid(dict(candidate.options)):
                out.append(candidate)
    return list(dict.fromkeys(out))


def search(spaces: list[Space], objective: Callable[[Setting, int], float], n_items: int,
           budget_s: float, *, clock: Callable[[], float] = time.monotonic, cache: dict | None = None,
           on_score: Callable[[Trial], None] | None = None, margin: float = 0.5, refine: bool = True,
           progress=None, max_rounds: int = 30) -> SearchResult:
    """Run the search (see the module docstring). `cache`: {spec: {"nll": [...], "stopped": bool,
    "seconds": [...]}},
    read for settings scored before and updated in place; `on_score(trial)` after every newly
    scored sequence (to save the cache); `progress`: a tqdm-like bar (update, total, set_description);
    `max_rounds`: refinement rounds at most."""
    cache = {} if cache is None else cache
    trials: dict[str, Trial] = {}
    start = clock()
    # time already spent: the seconds cached with the sequences this search replays, so a rerun
    # stops where the first run stopped and a larger budget goes on from there
    state = {"out": False, "calls": 0, "replayed": 0.0, "mark": 0.0}
    defaults = {s.spec for sp in spaces for s in sp.defaults()}
    by_method = {sp.method: sp for sp in spaces}

    def elapsed() -> float:
        return state["replayed"] + clock() - start

    def add_total(n: int) -> None:
        if progress is not None:
            progress.total = (progress.total or 0) + n * n_items
            progress.refresh()

    def run(setting: Setting, stage: str) -> None:
        if state["out"]:
            return
        trial = trials.get(setting.spec)
        if trial is None:
            old = cache.get(setting.spec, {})
            trial = trials[setting.spec] = Trial(setting, stage, setting.spec in defaults,
                                                 list(old.get("nll", []))[:n_items], bool(old.get("stopped")),
                                                 list(old.get("seconds", []))[:n_items])
            state["replayed"] += sum(trial.seconds)
            state["mark"] += sum(trial.seconds)
            if progress is not None:
                progress.update(len(trial.nll) + (n_items - len(trial.nll) if trial.stopped else 0))
        while len(trial.nll) < n_items and not trial.stopped:
            if elapsed() >= budget_s:
                state["out"] = True
                if not trial.nll:   # never started: "not run", like the rest of the grid
                    del trials[setting.spec]
                return
            space = by_method[setting.method]
            best = min((t for t in trials.values() if t.status(n_items) == "done" and space.rivals(setting, t.setting)),
                       key=lambda t: t.mean, default=None)
            if progress is not None:
                progress.set_description(f"{setting.spec} [{len(trial.nll) + 1}/{n_items}]")
            trial.nll.append(float(objective(setting, len(trial.nll))))
            now = elapsed()
            trial.seconds.append(round(now - state["mark"], 3))
            state["mark"] = now
            state["calls"] += 1
            i = len(trial.nll)
            # hopeless: worse than the best finished setting on the same sequences by > margin nats
            if best is not None and i < n_items and trial.mean > sum(best.nll[:i]) / i + margin:
                trial.stopped = True
            cache[setting.spec] = {"nll": list(trial.nll), "stopped": trial.stopped, "seconds": list(trial.seconds)}
            if progress is not None:
                progress.update(1 + (n_items - i if trial.stopped else 0))
            if on_score is not None:
                on_score(trial)

    first = _interleave([sp.defaults() for sp in spaces])
    grid = [s for s in _interleave([sp.coarse() for sp in spaces]) if s not in first]
    add_total(len(first) + len(grid))
    for setting in first + grid:
        run(setting, DEFAULT if setting in first else GRID)
    if not state["out"]:   # built from the whole grid's scores (out of budget: nothing more is scored)
        built = _interleave([[s for s in sp.assembled(list(trials.values()), n_items) if s.spec not in trials]
                             for sp in spaces])
        add_total(len(built))
        for setting in built:
            run(setting, ASSEMBLE)
    active = set(by_method) if refine else set()
    rounds_left = max_rounds   # a safety net: every option is bounded, so a round ends anyway
    while active and not state["out"] and rounds_left > 0:
        rounds_left -= 1
        before = {m: getattr(_best(trials, n_items, m), "spec", None) for m in active}
        rounds = {}
        for m in active:
            best = _best(trials, n_items, m)
            if best is not None:
                tried = [t.setting for t in trials.values() if t.setting.method == m]
                rounds[m] = [s for s in by_method[m].around(best.setting, tried) if s.spec not in trials]
        todo = _interleave([rounds[m] for m in by_method if rounds.get(m)])
        add_total(len(todo))
        for setting in todo:
            run(setting, REFINE)
        active = {m for m in rounds if rounds[m]
                  and getattr(_best(trials, n_items, m), "spec", None) != before[m]}
    seen = set(trials)
    return SearchResult(list(trials.values()), [s for s in first + grid if s.spec not in seen],
                        state["out"], state["calls"])


def _best(trials: dict, n_items: int, method: str) -> Trial | None:
    done = [t for t in trials.values() if t.setting.method == method and t.status(n_items) == "done"]
    return min(done, key=lambda t: t.mean, default=None)


# --- the search spaces: functions of L0 (trained length) and L (target length) ------------------

def _pow2_from(x: float, count: int) -> list[int]:
    """`count` powers of two, from the smallest >= x."""
    first = 1 << max(0, math.ceil(math.log2(max(x, 1))))
    return [first << i for i in range(count)]


def _frequency(method: str, L0: int, L: int, logn: bool) -> Space:
    """pi / ntk / yarn / dynamic: factor s = L / L0 (the factor that maps L onto L0; HF's
    convention and the documented default here), 1.5 s and 2 s; refinement stays in 1..4 s."""
    s = L / L0
    return Space(method, {"factor": [s, 1.5 * s, 2 * s]}, {"factor": s},
                 valid=lambda o: 1 <= o["factor"] <= 4 * s, logn=logn)


def _rerope(L0: int, L: int, logn: bool) -> Space:
    # window < L0: a ReRoPE window at or past L0 leaves distances the model never saw
    return Space("rerope", {"window": [L0 // 8, L0 // 4, L0 // 2, 3 * L0 // 4]}, {"window": max(1, L0 // 4)},
                 integer=("window",), valid=lambda o: 1 <= o["window"] < L0, logn=logn)


def _leaky_rerope(L0: int, L: int, logn: bool) -> Space:
    # the largest position w + (L - w) / k must stay below L0: k >= (L - w) / (L0 - w)
    windows = [L0 // 8, L0 // 4, L0 // 2]
    factors = sorted({f for w in windows for f in _pow2_from((L - w) / (L0 - w), 3)})
    return Space("leaky_rerope", {"window": windows, "factor": factors},
                 {"window": max(1, L0 // 4), "factor": 16.0}, integer=("window",),
                 valid=lambda o: 1 <= o["window"] < L0 and o["factor"] <= L
                 and o["window"] + (L - o["window"]) / o["factor"] <= L0,
                 logn=logn)


def _self_extend(L0: int, L: int, logn: bool) -> Space:
    # capacity (L0 - w) g + w >= L: the smallest feasible group, then 2 and 4 times it
    windows = [L0 // 8, L0 // 4, L0 // 2]
    groups = sorted({g for w in windows for g in _pow2_from((L - w) / (L0 - w), 3)})
    return Space("self_extend", {"group": groups, "window": windows}, {"group": 8, "window": max(1, L0 // 4)},
                 integer=("group", "window"),
                 valid=lambda o: 1 <= o["window"] < L0 and o["group"] <= L
                 and o["window"] + (L - o["window"]) / o["group"] <= L0,
                 logn=logn)


def _dca(L0: int, L: int, logn: bool) -> Space:
    # chunk_size <= L0 - 1: its largest distance, chunk_size, then stays inside the trained range
    return Space("dca", {"chunk_size": [L0 // 2, 3 * L0 // 4, L0 - 1], "local_size": [L0 // 16, L0 // 8, L0 // 4]},
                 {"chunk_size": max(2, 3 * L0 // 4), "local_size": L0 // 8}, integer=("chunk_size", "local_size"),
                 valid=lambda o: 1 <= o["local_size"] < o["chunk_size"] <= L0 - 1, logn=logn)


DPE_GROUPS = 8            # the authors' frequency groups of the rotary pairs, highest frequency first
DPE_CANDIDATES = 8        # at most this many scales per group (the authors' 8 at 128k from 8k)


@dataclass
class DpeSpace(Space):
    """DPE's per-group scales (option "scales": one integer per frequency group, written
    "4-4-2-16-...") at a fixed window, searched as its authors detect them (their offline step A):
    for each group in turn, every other group at `base`, that group's scale over grid["scales"];
    then the vector of each group's best scale ("assembled"), and with `logn_assembled` that vector
    with +logn too (log-n is every other method's option in the search; the sweep itself has none).
    Refinement: around the method's best vector, each group's scale halved and doubled, the others
    kept (and its +logn), within grid["scales"]'s range."""
    base: int = 1
    groups: int = DPE_GROUPS
    logn_assembled: bool = False

    def _vector(self, scales: tuple, logn: bool = False) -> Setting:
        return self.setting({"scales": scales, "window": self.default["window"]}, logn)

    def coarse(self) -> list[Setting]:
        sweep = [tuple(c if i == g else self.base for i in range(self.groups))
                 for g in range(self.groups) for c in self.grid["scales"]]
        return list(dict.fromkeys(self._vector(s) for s in sweep))   # the all-`base` vector once

    def sweeps(self, setting: Setting) -> set[int]:
        """The groups whose sweep holds `setting`: every group for the all-`base` vector, none for
        a setting outside the sweep."""
        if setting.method != self.method or setting.logn or setting.get("window") != self.default["window"]:
            return set()
        scales = setting.get("scales")
        off = {i for i, v in enumerate(scales) if v != self.base}
        if len(scales) != self.groups or len(off) > 1 or any(scales[i] not in self.grid["scales"] for i in off):
            return set()
        return off or set(range(self.groups))

    def rivals(self, setting: Setting, other: Setting) -> bool:
        """A sweep setting is held against its own group's settings only: another group's (or
        method's) better score must not stop the candidate its group would keep."""
        mine = self.sweeps(setting)
        return not mine or bool(mine & self.sweeps(other))

    def assembled(self, trials: list[Trial], n_items: int) -> list[Setting]:
        """Each group's best finished scale of the sweep (the first tried among equals; `base` when
        none of the group's settings finished), as one vector."""
        done = [t for t in trials if t.status(n_items) == "done"]
        best = []
        for g in range(self.groups):
            sweep = [t for t in done if g in self.sweeps(t.setting)]
            best.append(min(sweep, key=lambda t: t.mean).setting.get("scales")[g] if sweep else self.base)
        return [self._vector(tuple(best), logn) for logn in ((False, True) if self.logn_assembled else (False,))]

    def around(self, best: Setting, tried: list[Setting]) -> list[Setting]:
        lo, hi = min(self.grid["scales"]), max(self.grid["scales"])
        scales = best.get("scales")
        out = [self._vector(scales[:g] + (v,) + scales[g + 1:], best.logn) for g in range(self.groups)
               for v in (scales[g] // 2, scales[g] * 2) if lo <= v <= hi and v != scales[g]]
        return [s for s in dict.fromkeys(out) if s not in tried]


def dpe_space(L0: int, L: int, groups: int = DPE_GROUPS, logn: bool = False) -> DpeSpace:
    """DPE at target length L from L0. The sweep has no +logn (the authors', at twice the cost
    otherwise); `logn` adds the assembled vector with +logn, one setting.
    Window W = L0 / 8 (the authors' 1024 at 8k); the other groups at 2 L / L0, rounded up to a
    power of two (its largest far distance, (L - W) / s + W, then stays under L0 / 2 + W); each
    group over the scales L / l for l = L, L / 2, ..., W: the powers of two 1 .. L / W, the
    DPE_CANDIDATES largest when there are more. top-k is left to the method's default. Cost: the
    sweep's groups x (candidates - 1) + 1 settings (the all-base vector is every group's), then
    the assembled vector (and its +logn); refinement adds up to 2 x groups a round."""
    window = max(1, L0 // 8)
    scales = [1 << k for k in range(max(1, L // window).bit_length()) if (1 << k) * window <= L][-DPE_CANDIDATES:]
    base = _pow2_from(2 * L / L0, 1)[0]
    return DpeSpace("dpe", {"scales": scales, "window": [window]}, {"scales": (base,) * groups, "window": window},
                    integer=("scales", "window"), logn=False, base=base, groups=groups, logn_assembled=logn)


SPACES = {
    "self_extend": _self_extend,
    "dca": _dca,
    "rerope": _rerope,
    "leaky_rerope": _leaky_rerope,
    "yarn": lambda L0, L, logn: _frequency("yarn", L0, L, logn),
    "ntk": lambda L0, L, logn: _frequency("ntk", L0, L, logn),
    "dynamic": lambda L0, L, logn: _frequency("dynamic", L0, L, logn),
    "pi": lambda L0, L, logn: _frequency("pi", L0, L, logn),
    "dpe": lambda L0, L, logn: dpe_space(L0, L, logn=logn),
}
DEFAULT_METHODS = ("self_extend", "dca", "rerope", "yarn")


def spaces_for(methods: list[str], train_length: int, length: int, logn: bool = True) -> list[Space]:
    return [SPACES[m](train_length, length, logn) for m in methods]
