"""The FIRE paper's language-model aggregations (Li et al. 2023, "Functional Interpolation for
Relative Positions Improves Long Context Transformers", §4.1, Fig. 1-2 and its C4 log-perplexity
tables) over a sweep of `lengen lm` runs, as pandas DataFrames. Pure functions: the tests feed them
hand-made tables.

Inputs (see lengen/reports/lm.py):
- `runs`: one row per planned run (run_id, pe, seed, lr, train_length, steps, done, ... and any
  option that varies between runs);
- `values`: long form, one row per finished run, evaluation method and length:
  run_id, method, length and the metric (`ppl` or `accuracy`).

A *variant* (a row of the table, a line of the figure) is a run's encoding, the evaluation method
when it is not plain evaluation, and every option that varies between runs of the same encoding,
except the seed (what the cells average over). Labels follow the paper: `NoPE`, `RoPE`, `ALiBi`,
`Kerple`, `T5's RPE`, `FIRE`, `FIRE-S` (and the later papers' `p-RoPE`, `FoPE`); a training-free method is appended with " + " as its spec
(`RoPE + pi:factor=8`), other varying options with ", " (`FIRE, lr=0.001`).

Cells: mean, sample std (ddof 1) and 95% t interval (lengen.reports.stats) over seeds of the log
perplexity (natural log of ppl, as the paper's tables) or of the accuracy; a cell of one run has
no std or interval. A NaN value (a length the model cannot take) is left out of its cell; an
infinite perplexity makes the cell's mean inf (and its std and interval NaN).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lengen.extrapolation.compose import is_plain
from lengen.reports.stats import summarize

#: the encodings as the FIRE paper names them; any other name is shown as given
PE_LABELS = {"none": "NoPE", "nope": "NoPE", "rope": "RoPE", "alibi": "ALiBi", "kerple": "Kerple",
             "kerple_log": "Kerple (log)", "kerple_power": "Kerple (power)", "t5": "T5's RPE", "fire": "FIRE",
             "fire_shared": "FIRE-S", "sincos": "Sinusoidal", "learned": "Learned", "relative": "Transformer-XL",
             "sandwich": "Sandwich", "p_rope": "p-RoPE", "fope": "FoPE",
             "cope": "CoPE"}

#: training position samplers under their papers' names; any other name is shown as given
POSITION_LABELS = {"pose": "PoSE"}
#: logit scalings shown by name alone (the log-n ones keep `logit_scale=log_n`)
LOGIT_SCALE_LABELS = {"ssmax": "SSMax", "llama4_temperature": "Llama 4 temperature"}

#: columns of `runs` that are never part of a variant
NOT_VARIANT = {"run_id", "pe", "seed", "done", "train_loss", "val_ppl", "unigram_ppl", "parameters", "seconds", "train_seconds",
               "eval_seconds", "device", "variant", "group", "group_label", "method", "drope_c"}

METRICS = ("ppl", "accuracy")


def encoding_label(pe) -> str:
    """The paper's name of an encoding (`rope` -> `RoPE`); an unknown name as given."""
    return PE_LABELS.get(str(pe), str(pe))


def position_label(positions) -> str:
    """The paper's name of a position sampler (`pose` -> `PoSE`); an unknown name as given."""
    return POSITION_LABELS.get(str(positions), str(positions))


def pattern_names(value) -> list[str]:
    """A layer_pe value as a list of names: a list, or text as results tables hold it
    ("rope,rope,rope,none"; a list's repr "['rope', 'none']" is read too)."""
    if isinstance(value, (list, tuple)):
        return [str(x) for x in value]
    text = str(value).strip().strip("[]")
    return [x.strip().strip("'\"") for x in text.split(",") if x.strip()]


def layer_pattern_label(value) -> str:
    """`RoPE/NoPE 3:1` for the per-layer encodings rope,rope,rope,none: the encodings in order of
    first appearance and how many layers of the pattern each has."""
    names = pattern_names(value)
    counts = {n: names.count(n) for n in dict.fromkeys(names)}
    return "/".join(encoding_label(n) for n in counts) + " " + ":".join(str(c) for c in counts.values())


def option_label(column: str, value, fmt=str) -> str:
    """How a varying option names a variant: `RoPE/NoPE 3:1` for a layer pattern, `SSMax` for
    logit_scale=ssmax, nothing ("") for logit_scale=none (the plain attention: `rope`, not `rope,
    logit_scale=none`, beside `rope, logit_scale=log_n`), else `key=value` (`fmt` formats the
    value; a nested option by its own key: `target=128` for `position_options.target`)."""
    if column == "logit_scale" and str(value) == "none":
        return ""
    if column == "layer_pe":
        return layer_pattern_label(value)
    if column == "logit_scale" and str(value) in LOGIT_SCALE_LABELS:
        return LOGIT_SCALE_LABELS[str(value)]
    return f"{column.rsplit('.', 1)[-1]}={fmt(value)}"


def is_plain_method(method) -> bool:
    """Plain evaluation ("rope", "base", ...): no training-free method."""
    return method is None or (isinstance(method, float) and math.isnan(method)) or is_plain(str(method))


def option_columns(runs: pd.DataFrame, by: str = "pe", skip=NOT_VARIANT) -> list[str]:
    """Columns of `runs` (in table order) that vary between runs of the same encoding (the same
    value of column `by`), the seed and the bookkeeping columns (`skip`) left out. An option that
    differs only between encodings (an encoding's own options, NaN for the others) is implied by
    the encoding and left out."""
    cols = []
    for c in runs.columns:
        if c in skip or c == by:
            continue
        text = runs[c].astype(str)
        # dropna=False: an option set for some runs and not others varies (pandas 3 keeps NaN as NaN in text)
        if (text.groupby(runs[by].astype(str)).nunique(dropna=False) > 1).any():
            cols.append(c)
    return cols


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    if isinstance(v, np.generic):
        v = v.item()
    return str(v)


def variant_label(pe, method=None, options: dict | None = None, labels: dict | None = None) -> str:
    """`RoPE`, `RoPE + pi:factor=8`, `FIRE, lr=0.001`, `RoPE, PoSE`: the encoding's name (from
    `labels`, default PE_LABELS), the method unless it is plain evaluation, then the options (NaN
    ones left out; a varying training sampler by its name alone, none for standard positions)."""
    label = (PE_LABELS if labels is None else labels).get(str(pe), str(pe))
    if not is_plain_method(method):
        label += f" + {method}"
    extra = []
    for k, v in (options or {}).items():
        if np.ndim(v) == 0 and pd.isna(v):
            continue
        if k == "positions":
            extra += [] if str(v) == "standard" else [position_label(v)]
        else:
            extra.append(option_label(k, v, _fmt))
    return ", ".join([label, *filter(None, extra)])


def add_groups(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with `group`: the label of its plain variant (encoding and varying options)."""
    runs = runs.copy()
    cols = option_columns(runs)
    runs["group"] = [variant_label(r["pe"], None, {c: r[c] for c in cols}) for _, r in runs.iterrows()]
    return runs


def _value_column(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, not {metric!r}")
    return metric


def variants(runs: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:
    """One row per variant, in table order: variant, encoding (the paper's name), pe, method
    (as evaluated; "" for a group with no finished run yet), group, planned (runs of the group).

    Order: encodings in order of first appearance in `runs`; within an encoding, plain evaluation
    before the training-free methods (methods in order of first appearance in `values`); within
    that, the groups (option values) in order of first appearance."""
    runs = add_groups(runs)
    pe_order = {pe: i for i, pe in reversed(list(enumerate(runs["pe"].astype(str))))}
    group_order = {g: i for i, g in reversed(list(enumerate(runs["group"])))}
    planned = runs.groupby("group", sort=False).size()
    group_pe = dict(zip(runs["group"], runs["pe"].astype(str)))
    run_group = dict(zip(runs["run_id"], runs["group"]))

    pairs = {}  # (group, method) -> method order
    if len(values):
        seen = values[["run_id", "method"]].drop_duplicates()
        method_order = {m: i for i, m in reversed(list(enumerate(seen["method"])))}
        for rid, method in seen.itertuples(index=False):
            group = run_group.get(rid)
            if group is None:
                continue
            key = (group, "plain" if is_plain_method(method) else method)
            pairs.setdefault(key, (method, -1 if is_plain_method(method) else method_order[method]))
    for group in planned.index:  # every group has its plain row, finished or not
        pairs.setdefault((group, "plain"), ("", -1))

    rows = []
    for (group, _), (method, m_order) in pairs.items():
        pe = group_pe[group]
        options_part = group[len(encoding_label(pe)):]  # ", lr=0.001" or ""
        label = encoding_label(pe) + ("" if m_order < 0 else f" + {method}") + options_part
        rows.append({"variant": label, "encoding": encoding_label(pe), "pe": pe, "method": method, "group": group,
                     "planned": int(planned[group]), "_order": (pe_order[pe], m_order, group_order[group])})
    out = pd.DataFrame(rows, columns=["variant", "encoding", "pe", "method", "group", "planned", "_order"])
    out = out.sort_values("_order", kind="stable").drop(columns="_order").reset_index(drop=True)
    return out


def long_values(runs: pd.DataFrame, values: pd.DataFrame, metric: str) -> pd.DataFrame:
    """`values` of runs in `runs` with variant, encoding, seed, train_length and `value`: the log
    perplexity (natural log; inf stays inf) for metric ppl, the accuracy for metric accuracy."""
    col = _value_column(metric)
    runs = add_groups(runs)
    cols = ["run_id", "method", "length", "variant", "encoding", "group", "seed", "value"]
    if not len(values):
        return pd.DataFrame(columns=cols)
    v = values.merge(runs[["run_id", "pe", "group", "seed"]], on="run_id", how="inner")
    raw = pd.to_numeric(v[col], errors="coerce").astype(float)
    if metric == "ppl":
        with np.errstate(divide="ignore", invalid="ignore"):
            v["value"] = np.log(raw)
    else:
        v["value"] = raw
    v["encoding"] = v["pe"].map(encoding_label)
    v["variant"] = [encoding_label(pe) + ("" if is_plain_method(m) else f" + {m}") + g[len(encoding_label(pe)):]
                    for pe, m, g in zip(v["pe"].astype(str), v["method"], v["group"])]
    v["length"] = v["length"].astype(int)
    # two plain labels for one run ("rope" and "plain") are one evaluation: count the run once
    return v.drop_duplicates(["run_id", "variant", "length"])[cols].reset_index(drop=True)


def _summary(s: pd.Series) -> tuple[float, float, float, float]:
    """(mean, std, low, high) of a cell's values, NaNs left out."""
    x = s.to_numpy(dtype=float)
    x = x[~np.isnan(x)]
    if np.isinf(x).any():
        # an infinite perplexity: the mean is inf (or -inf), the spread has no meaning
        return float(np.sum(x)), math.nan, math.nan, math.nan
    st = summarize(x)
    return st.mean, st.std, st.low, st.high


def cells(runs: pd.DataFrame, values: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Long form, one row per variant and length (every length any run was evaluated at), in
    table order: variant, encoding, method, length, mean, std (ddof 1), low and high (the 95% t
    interval of the mean), n (runs with a value), planned."""
    order = variants(runs, values)
    lv = long_values(runs, values, metric)
    lengths = sorted(int(x) for x in lv["length"].unique())
    stats = {}
    for (variant, length), g in lv.groupby(["variant", "length"], sort=False):
        stats[(variant, int(length))] = (*_summary(g["value"]), int(g["value"].notna().sum()))
    rows = []
    for r in order.itertuples(index=False):
        for length in lengths:
            mean, std, low, high, n = stats.get((r.variant, length), (math.nan,) * 4 + (0,))
            rows.append({"variant": r.variant, "encoding": r.encoding, "method": r.method, "length": length,
                         "mean": mean, "std": std, "low": low, "high": high, "n": n, "planned": r.planned})
    return pd.DataFrame(rows, columns=["variant", "encoding", "method", "length", "mean", "std", "low", "high", "n",
                                       "planned"])


def table(runs: pd.DataFrame, values: pd.DataFrame, metric: str,
          columns=("mean", "std", "n")) -> tuple[pd.DataFrame, ...]:
    """The frames `columns` of cells(): variants (rows, table order) x lengths (columns, ascending
    ints): by default mean and std (ddof 1) over seeds of log ppl or accuracy, and n, the runs
    with a value; also low and high, the 95% interval. NaN: no value."""
    c = cells(runs, values, metric)
    order = list(variants(runs, values)["variant"])
    lengths = sorted(int(x) for x in c["length"].unique())

    def pivot(col):
        if not len(c):
            return pd.DataFrame(index=pd.Index(order, name="variant"), columns=pd.Index([], name="length"),
                                dtype=float)
        p = c.pivot(index="variant", columns="length", values=col)
        return p.reindex(index=order, columns=lengths)

    return tuple(pivot(col).fillna(0).astype(int) if col == "n" else pivot(col).astype(float) for col in columns)


def best_cells(mean: pd.DataFrame, metric: str) -> pd.DataFrame:
    """True where a cell is the best of its column: the lowest log perplexity, the highest
    accuracy; ties are all best. Only finite values can be best (a column of inf has none)."""
    _value_column(metric)
    x = mean.to_numpy(dtype=float)
    best = np.zeros(x.shape, dtype=bool)
    for j in range(x.shape[1]):
        col = x[:, j]
        finite = np.isfinite(col)
        if not finite.any():
            continue
        target = col[finite].min() if metric == "ppl" else col[finite].max()
        best[:, j] = finite & np.isclose(col, target, rtol=1e-12, atol=0.0)
    return pd.DataFrame(best, index=mean.index, columns=mean.columns)


def train_lengths(runs: pd.DataFrame) -> list[int]:
    """The training windows of the sweep's runs, ascending."""
    if "train_length" not in runs or not len(runs):
        return []
    return sorted({int(x) for x in runs["train_length"].dropna()})


def length_header(length: int, trained: list[int]) -> str:
    """A column header: the length, with "(train)" when some run was trained at that length."""
    return f"{int(length)} (train)" if int(length) in trained else str(int(length))


def missing_cells(cells_frame: pd.DataFrame, variants_frame: pd.DataFrame) -> list[tuple[str, int | None, int, int]]:
    """(variant, length, runs with a value, planned runs) for every cell with fewer values than
    planned runs (unfinished runs, or lengths a model could not take), in table order. With no
    length known yet (no finished run), one entry per variant with length None."""
    if not len(cells_frame):
        return [(r.variant, None, 0, int(r.planned)) for r in variants_frame.itertuples(index=False)]
    return [(r.variant, int(r.length), int(r.n), int(r.planned)) for r in cells_frame.itertuples(index=False)
            if r.n < r.planned]
