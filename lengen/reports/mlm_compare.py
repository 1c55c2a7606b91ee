"""Paired comparisons in a masked-LM sweep (`command: mlm`): `lengen report SWEEP --versus ROW` and
`--compare A B`, and the table of Su's hypotheses H1-H5 (docs/mlm.md, "Su's claims").

A row is one line of mlm_table.md: a training variant, the test positions it was evaluated at and
log-n on or off, named `standard; test standard; log-n off`. Two rows are paired seed by seed (the
same seed of each side's variant; two rows of one run pair with themselves) at each length, and
the paired difference of the masked-token accuracy (in points) is summarized with its 95% t
interval and the verdict of lengen.reports.stats (a higher accuracy wins)."""

from __future__ import annotations

import pandas as pd

from lengen.errors import LengenError
from lengen.formatting import quoted_list
from lengen.reports import mlm
from lengen.reports.render import markdown_rows, md_escape
from lengen.reports.stats import Paired, paired

SCALE = 100.0   # accuracy in points
#: Su's words for a verdict on "A > B"
CLAIM = {"wins": "holds", "loses": "the opposite holds", "within noise": "within noise", "not shown": "not shown"}


def row_name(variant: str, test_positions: str, log_n: bool) -> str:
    """`standard; test standard; log-n off`: how a command line and the docs name a table row."""
    return f"{variant}; test {test_positions}; log-n {'on' if log_n else 'off'}"


def _values(runs: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:
    lv = mlm.long_values(runs, values)
    lv = lv[lv["variant"] != mlm.UNIGRAM].copy()
    lv["row"] = [row_name(v, t, b) for v, t, b in zip(lv["variant"], lv["test_positions"], lv["log_n"])]
    return lv


def _by_seed(lv: pd.DataFrame, row: str, length: int) -> dict:
    g = lv[(lv["row"] == row) & (lv["length"] == length)]
    return {int(s): SCALE * float(a) for s, a in zip(g["seed"], g["accuracy"]) if pd.notna(a)}


def _check(lv: pd.DataFrame, *rows: str) -> None:
    known = list(dict.fromkeys(lv["row"]))
    for r in rows:
        if r not in known:
            raise LengenError(f"no row {r!r} in this masked-LM sweep; its rows: " + quoted_list(known))


def _record(name: str, length: int, p: Paired) -> dict:
    return {"row": name, "length": length, **p.fields()}


def mlm_versus(runs: pd.DataFrame, values: pd.DataFrame, base: str, others: list[str] | None = None) -> pd.DataFrame:
    """Each row of `others` (default: every other row) against `base` at each length: row, length,
    n (seeds paired), difference (row - base, accuracy points), std, low, high, wins, losses,
    verdict."""
    lv = _values(runs, values)
    _check(lv, base, *(others or []))
    rows = others or [r for r in dict.fromkeys(lv["row"]) if r != base]
    lengths = sorted(int(x) for x in lv["length"].unique())
    out = [_record(r, n, paired(_by_seed(lv, r, n), _by_seed(lv, base, n))) for r in rows for n in lengths]
    return pd.DataFrame([o for o in out if o["n"] > 0])


def _cell(r, verdict: bool = True) -> str:
    """`+2.2 [+0.6, +3.8] wins` (with verdict=False: `... (n=4)`); one seed has no interval."""
    if r is None:
        return "—"
    if r["n"] < 2:
        return f"{r['difference']:+.1f} (n={r['n']})" + (" not shown" if verdict else "")
    interval = f"{r['difference']:+.1f} [{r['low']:+.1f}, {r['high']:+.1f}]"
    return f"{interval} {r['verdict']}" if verdict else f"{interval} (n={r['n']})"


def versus_markdown(table: pd.DataFrame) -> str:
    """Rows x lengths; a cell: the mean paired difference in accuracy points, its 95% interval and
    the verdict."""
    lengths = sorted(int(x) for x in table["length"].unique())
    rows = []
    for row, group in table.groupby("row", sort=False):
        by = {int(r["length"]): r for _, r in group.iterrows()}
        rows.append([row, *(_cell(by.get(n)) for n in lengths)])
    return markdown_rows(["row", *(f"acc@{n}" for n in lengths)], rows, escape=md_escape)


def _variant(lv: pd.DataFrame, positions: str, contains: str = "") -> str | None:
    """The variant label of a training sampler (`equal_mean` with `exponential` in its label when
    several equal-mean distributions ran)."""
    names = [v for v in dict.fromkeys(lv["variant"]) if v.split(",")[0] == positions and contains in v]
    return names[0] if names else None


def _gain(lv: pd.DataFrame, variant: str, test: str, length: int) -> dict:
    """{seed: accuracy with log-n - without} of one variant at one test-position mode."""
    on, off = (_by_seed(lv, row_name(variant, test, b), length) for b in (True, False))
    return {s: on[s] - off[s] for s in on if s in off}


def su_hypotheses(runs: pd.DataFrame, values: pd.DataFrame, length: int | None = None) -> pd.DataFrame:
    """Su's H1-H5 (docs/mlm.md, "Su's claims") at `length` (default the longest): one line per comparison,
    hypothesis, comparison (A vs B, the claim being A > B), n, difference (A - B, accuracy
    points), low, high, verdict and Su's claim (holds / the opposite holds / within noise / not
    shown). Comparisons whose rows did not run are left out."""
    lv = _values(runs, values)
    length = length or int(lv["length"].max())
    std, rand = _variant(lv, "standard"), _variant(lv, "randomized")
    exp = _variant(lv, "equal_mean", "exponential") or _variant(lv, "equal_mean")
    modes = {v: list(dict.fromkeys(lv.loc[lv["variant"] == v, "test_positions"])) for v in lv["variant"].unique()}
    out = []

    def add(h, what, a: dict, b: dict):
        p = paired(a, b)
        if p.difference.n:
            rec = _record(what, length, p)
            out.append({"hypothesis": h, **rec, "claim": CLAIM[p.verdict]})

    rows_at = lambda r: _by_seed(lv, r, length)  # noqa: E731 - a short local reader
    for variant, tests in modes.items():          # H1: log-n > plain, every trained row
        for test in tests:
            on, off = row_name(variant, test, True), row_name(variant, test, False)
            add("H1", f"{on} vs log-n off", rows_at(on), rows_at(off))
    if std and rand:
        for test in modes.get(rand, []):           # H2: randomized > standard, same log-n
            for log_n in (False, True):
                a, b = row_name(rand, test, log_n), row_name(std, "standard", log_n)
                add("H2", f"{a} vs {b}", rows_at(a), rows_at(b))
    if rand and {"uniform", "random"} <= set(modes.get(rand, [])):
        for log_n in (False, True):                # H3: evenly spaced test positions > random ones
            a, b = row_name(rand, "uniform", log_n), row_name(rand, "random", log_n)
            add("H3", f"{a} vs {b}", rows_at(a), rows_at(b))
    if std and rand:
        for test in modes.get(rand, []):           # H4: log-n gains more after randomized training
            add("H4", f"log-n gain of {rand}; test {test} vs of {std}; test standard",
                _gain(lv, rand, test, length), _gain(lv, std, "standard", length))
    if exp:                                        # H5: exponential equal-mean + log-n is the best row
        best = row_name(exp, "standard", True)
        for other in dict.fromkeys(lv["row"]):
            if other != best:
                add("H5", f"{best} vs {other}", rows_at(best), rows_at(other))
    return pd.DataFrame(out)


def hypotheses_markdown(table: pd.DataFrame) -> str:
    """One line per comparison: hypothesis, comparison, the paired difference with its interval
    and n, and Su's claim."""
    if not len(table):
        return "No comparison of Su's hypotheses has a finished pair of runs.\n"
    length = int(table["length"].iloc[0])
    rows = [[r["hypothesis"], r["row"], _cell(r, verdict=False), r["claim"]] for _, r in table.iterrows()]
    return markdown_rows(["H", "comparison (claim: the first is better)", f"acc@{length} difference, points",
                          "Su's claim"], rows, escape=md_escape)


def mlm_versus_text(data, base: str, other: str | None = None) -> str:
    """`--versus BASE` (every other row) or `--compare A B` (other=A, base=B) of an MLM sweep's
    data, as the command prints it."""
    runs, values = data.runs, data.values
    table = mlm_versus(runs, values, base, [other] if other else None)
    return versus_markdown(table) + (f"differences row - {base} in masked-token accuracy (points) over the seeds "
                                     "where both have a value; interval: 95% t over the seeds; a win is a "
                                     "higher accuracy\n")
