"""A sweep's results tables, rebuilt from the run directories (the single source of truth) by the
one process that coordinates the sweep, and written atomically: workers never write them, and
rebuilding from the same run directories gives the same bytes. Two tables, whatever the kind:

    results.csv         one row per finished run: its config, then what it gave
    <values by length>  run_id, the columns that group a run's values, length, the value (long
                        form): accuracy_by_length.csv for CHE runs, ppl_by_length.csv for LMs

Which columns and rows a finished run gives, and the tables' names, are the sweep kind's
(lengen.sweeps.kinds: `tables`, the column tuples, `rows_of`); which runs are finished, keeping
their rows, the order and the writing are this module's."""

from __future__ import annotations

import csv
import io as _io
import json
import math

from lengen import io
from lengen.sweeps.kinds.base import SweepKind
from lengen.sweeps.sweep_dir import SweepDir

#: varying options never shown as columns (where a run executed is in `device`)
_HIDDEN = {"device"}


def _flat(name: str, value) -> dict:
    if isinstance(value, dict):
        return {f"{name}.{k}": v for k, v in sorted(value.items())}
    if isinstance(value, list):  # layer_pe: as the command line writes it, "rope,rope,rope,none"
        return {name: ",".join(str(v) for v in value)}
    return {name: value}


def flat_options(values: dict) -> dict:
    """Options by name (`kind.option_values(cfg)`), mapping options flattened (pe_options.base)."""
    out: dict = {}
    for name, value in values.items():
        out.update(_flat(name, value))
    return out


def varying_columns(runs, kind: SweepKind) -> list[str]:
    """Options (dict options flattened as name.key) whose value differs between runs, not already
    a column of the kind's table, in the option table's order."""
    per_run = [kind.option_values(r.config) for r in runs]  # one config walk per run
    shown = _HIDDEN | set(kind.leading_columns) | set(kind.trailing_columns)
    columns: list[str] = []
    for name in (per_run[0] if per_run else ()):
        if name in shown:
            continue
        values = [_flat(name, options[name]) for options in per_run]
        keys = sorted({k for v in values for k in v})
        for key in keys:
            if len({json.dumps(v.get(key), sort_keys=True) for v in values}) > 1:
                columns.append(key)
    return columns


def _by_length(values: list[tuple], at: int) -> list[tuple]:
    """A run's long rows with the length (item `at`) an int, ordered by length within each group
    of the items before it (the groups in their first order)."""
    values = [(*v[:at], int(v[at]), *v[at + 1:]) for v in values]
    groups: dict = {}
    for v in values:
        groups.setdefault(v[:at], len(groups))
    return sorted(values, key=lambda v: (groups[v[:at]], v[at]))


def _cell(value, nan_too: bool = False):
    """A value as the CSV holds it: None (and, with `nan_too`, NaN) as an empty cell."""
    empty = value is None or (nan_too and isinstance(value, float) and math.isnan(value))
    return "" if empty else value


class ResultsWriter:
    """Keeps the rows of finished runs (nothing in a run directory changes once its done file is
    written, and a run counts as finished only then) so periodic rebuilds during a long sweep read
    each finished run once."""

    def __init__(self, sweep: SweepDir, runs, kind: SweepKind, evaluation: dict | None = None,
                 known: dict | None = None):
        """`known`: run id -> (row, long rows less the run_id) of runs finished elsewhere (an
        earlier export), used for runs not finished in this folder."""
        self.sweep, self.runs, self.kind, self.evaluation = sweep, runs, kind, evaluation
        self.extra = varying_columns(runs, kind)
        self.columns = [*kind.leading_columns, *self.extra, *kind.trailing_for(evaluation)]
        # a row from elsewhere may lack a column this sweep has: an empty cell
        self.known = {rid: ({c: row.get(c, "") for c in self.columns}, values)
                      for rid, (row, values) in (known or {}).items()}
        self.by_length_columns = kind.by_length_columns(evaluation)
        self._cache: dict[str, tuple[dict, list]] = {}

    def config_row(self, run) -> dict:
        """What the config says of a run (finished or not): its id, the options among the
        kind's columns, the varying options."""
        values = self.kind.option_values(run.config)
        flat = flat_options(values)
        return {"run_id": run.run_id, **{c: values[c] for c in self.kind.config_columns},
                **{c: flat.get(c) for c in self.extra}}

    def _row(self, run) -> tuple[dict, list] | None:
        if run.run_id in self._cache:
            return self._cache[run.run_id]
        path = self.sweep.run_path(run.run_id)
        if not self.sweep.is_done(run.run_id):  # no done file yet, or a damaged or foreign one (SweepDir.damage)
            return self.known.get(run.run_id)
        try:  # read again at the next rebuild
            done = io.read_json(path / self.sweep.done_file)
            result, values = self.kind.rows_of(path, done, self.evaluation)
        except (OSError, ValueError):
            return self.known.get(run.run_id)
        train_s, eval_s = result.get("train_seconds"), result.get("eval_seconds")
        row = {**self.config_row(run), **result,
               "seconds": round(train_s + eval_s, 3) if train_s is not None and eval_s is not None else None}
        self._cache[run.run_id] = got = (row, _by_length(values, self.by_length_columns.index("length") - 1))
        return got

    def rows(self):
        """(row or None, long rows less the run_id or None) per run, in sweep order."""
        for run in self.runs:
            got = self._row(run)
            yield got if got is not None else (None, None)

    def write(self, into=None) -> int:
        """Rewrite both tables (in the sweep folder, or in folder `into`); returns the number of
        finished runs."""
        table, long = _io.StringIO(), _io.StringIO()
        w, a = csv.writer(table, lineterminator="\n"), csv.writer(long, lineterminator="\n")
        w.writerow(self.columns)
        a.writerow(self.by_length_columns)
        finished = 0
        for row, values in self.rows():
            if row is None:
                continue
            finished += 1
            w.writerow([_cell(row[c]) for c in self.columns])
            a.writerows([row["run_id"], *v[:-1], _cell(v[-1], nan_too=True)] for v in values)
        results, by_length = self.kind.tables
        folder = self.sweep.path if into is None else into
        io.write_text(folder / results, table.getvalue())
        io.write_text(folder / by_length, long.getvalue())
        return finished
