"""results.csv and accuracy_by_length.csv, rebuilt from the run directories (the single source of
truth) by the one process that coordinates a sweep, and written atomically: workers never write
them, and rebuilding from the same run directories gives the same bytes."""

from __future__ import annotations

import csv
import io as _io
import json

from lengen import io
from lengen.sweeps.sweep_dir import SweepDir
from lengen.training.config import TRAIN_OPTIONS
from lengen.training.options import option_values

RESULTS = "results.csv"
ACCURACY = "accuracy_by_length.csv"
#: always present, in this order; every other option that varies in the sweep follows
BASE_COLUMNS = ["run_id", "task", "pe", "positions", "test_positions", "lr", "seed", "steps", "train_length",
                "max_length", "score", "accuracy_in_train_range", "seconds", "train_seconds", "eval_seconds",
                "device"]
#: varying options never shown as columns (where a run executed is in `device`)
_HIDDEN = {"device"}


def _flat(name: str, value) -> dict:
    if isinstance(value, dict):
        return {f"{name}.{k}": v for k, v in sorted(value.items())}
    return {name: value}


def flat_options(cfg, values=option_values) -> dict:
    """Every option of a config (`values(cfg)`: option -> value), mapping options flattened
    (pe_options.base)."""
    out: dict = {}
    for name, value in values(cfg).items():
        out.update(_flat(name, value))
    return out


def varying_columns(runs, options=TRAIN_OPTIONS, values=option_values, base=BASE_COLUMNS) -> list[str]:
    """Options (dict options flattened as name.key) whose value differs between runs, not already
    a base column, in `options` order. `values(cfg)` gives a config's options by name."""
    per_run = [values(r.config) for r in runs]  # one config walk per run
    columns: list[str] = []
    for name in options:
        if name in _HIDDEN or name in base:
            continue
        values = [_flat(name, options[name]) for options in per_run]
        keys = sorted({k for v in values for k in v})
        for key in keys:
            if len({json.dumps(v.get(key), sort_keys=True) for v in values}) > 1:
                columns.append(key)
    return columns


class ResultsWriter:
    """Keeps the rows of finished runs (an eval.json never changes once written) so periodic
    rebuilds during a long sweep read each run once."""

    def __init__(self, sweep: SweepDir, runs):
        self.sweep, self.runs = sweep, runs
        self.extra = varying_columns(runs)
        self._cache: dict[str, tuple[dict, list] | None] = {}

    def config_row(self, run) -> dict:
        """What the config says of a run (finished or not): identity, base options, varying options."""
        cfg = run.config
        flat = flat_options(cfg)
        return {"run_id": run.run_id, "task": cfg.task, "pe": cfg.model.pe, "positions": cfg.positions,
                "lr": cfg.lr, "seed": cfg.seed, "steps": cfg.steps, "train_length": cfg.train_length,
                "max_length": cfg.max_length, **{c: flat.get(c) for c in self.extra}}

    def _row(self, run) -> tuple[dict, list] | None:
        if self._cache.get(run.run_id) is not None:
            return self._cache[run.run_id]
        path = self.sweep.run_path(run.run_id) / "eval.json"
        try:
            ev = io.read_json(path)
        except (OSError, ValueError):
            return None
        train_s, eval_s = ev.get("train_seconds"), ev.get("eval_seconds")
        row = {**self.config_row(run), "test_positions": ev["test_positions"], "max_length": ev["max_length"],
               "score": ev["score"], "accuracy_in_train_range": ev["accuracy_in_train_range"],
               "seconds": round(train_s + eval_s, 3) if train_s is not None and eval_s is not None else None,
               "train_seconds": train_s, "eval_seconds": eval_s, "device": ev.get("device")}
        acc = [(int(n), a) for n, a in ev["accuracy_by_length"].items()]
        self._cache[run.run_id] = (row, acc)
        return row, acc

    def rows(self):
        """(row or None, accuracy pairs or None) per run, in sweep order."""
        for run in self.runs:
            got = self._row(run)
            yield (got if got is not None else (None, None))

    def write(self) -> int:
        """Rewrite both tables; returns the number of finished runs."""
        columns = BASE_COLUMNS + self.extra
        table, long = _io.StringIO(), _io.StringIO()
        w = csv.writer(table, lineterminator="\n")
        w.writerow(columns)
        a = csv.writer(long, lineterminator="\n")
        a.writerow(["run_id", "length", "accuracy"])
        n = 0
        for row, acc in self.rows():
            if row is None:
                continue
            n += 1
            w.writerow(["" if row[c] is None else row[c] for c in columns])
            for length, value in sorted(acc):
                a.writerow([row["run_id"], length, value])
        io.write_text(self.sweep.path / RESULTS, table.getvalue())
        io.write_text(self.sweep.path / ACCURACY, long.getvalue())
        return n
