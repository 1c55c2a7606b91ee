"""The tables of a language-model sweep (`command: lm`), rebuilt from the run directories by the
coordinating process and written atomically, like lengen.sweeps.results for CHE sweeps:

    results.csv         one row per finished run: its config, final training loss, validation ppl
    ppl_by_length.csv   run_id, method, length, ppl (accuracy for the passkey and ruler
                        protocols; ruler adds a task column before length)
"""

from __future__ import annotations

import csv
import io as _io
import math

from lengen import io
from lengen.lm.options import LM_OPTIONS, lm_option_values
from lengen.sweeps.results import flat_options, varying_columns
from lengen.sweeps.sweep_dir import SweepDir

RESULTS = "results.csv"
BY_LENGTH = "ppl_by_length.csv"
#: always present, in this order; every other option that varies in the sweep follows them
BASE_COLUMNS = ["run_id", "pe", "seed", "lr", "steps", "train_length"]
OUTCOME_COLUMNS = ["train_loss", "val_ppl", "unigram_ppl", "parameters", "seconds", "train_seconds",
                   "eval_seconds", "device"]


def metric_of(protocol: str) -> str:
    return "accuracy" if protocol in ("passkey", "ruler") else "ppl"


class LMResultsWriter:
    """Keeps the rows of finished runs (their done file never changes once written)."""

    def __init__(self, sweep: SweepDir, runs, done_file: str, protocol: str = "ppl"):
        self.sweep, self.runs, self.done_file = sweep, runs, done_file
        self.metric = metric_of(protocol)
        self.per_task = protocol == "ruler"  # ruler: one value per task, method and length
        self.extra = varying_columns(runs, LM_OPTIONS, lm_option_values, BASE_COLUMNS)
        self._cache: dict[str, tuple[dict, list]] = {}

    def config_row(self, run) -> dict:
        cfg = run.config
        flat = flat_options(cfg, lm_option_values)
        return {"run_id": run.run_id, "pe": cfg.model.pe, "seed": cfg.seed, "lr": cfg.lr, "steps": cfg.steps,
                "train_length": cfg.train_length, **{c: flat.get(c) for c in self.extra}}

    def _row(self, run) -> tuple[dict, list] | None:
        if run.run_id in self._cache:
            return self._cache[run.run_id]
        path = self.sweep.run_path(run.run_id)
        try:
            done = io.read_json(path / self.done_file)
            record = io.read_json(path / "eval.json")
        except (OSError, ValueError):
            return None
        self.metric = done.get("metric", self.metric)
        values = [(r["method"], int(r["length"]), r.get(self.metric), *([r["task"]] if self.per_task else []))
                  for r in done["rows"]]
        eval_s = done.get("eval_seconds")
        row = {**self.config_row(run), "train_loss": record.get("train_loss"), "val_ppl": record.get("val_ppl"),
               "unigram_ppl": record.get("unigram_ppl"), "parameters": record.get("parameters"),
               "train_seconds": record.get("train_seconds"), "eval_seconds": eval_s,
               "seconds": (round(record["train_seconds"] + eval_s, 3)
                           if record.get("train_seconds") is not None and eval_s is not None else None),
               "device": done.get("device")}
        self._cache[run.run_id] = (row, values)
        return row, values

    def rows(self):
        """(row or None, [(method, length, value[, task])] or None) per run, in sweep order."""
        for run in self.runs:
            got = self._row(run)
            yield got if got is not None else (None, None)

    def write(self) -> int:
        columns = BASE_COLUMNS + self.extra + OUTCOME_COLUMNS
        table, long = _io.StringIO(), _io.StringIO()
        w, a = csv.writer(table, lineterminator="\n"), csv.writer(long, lineterminator="\n")
        w.writerow(columns)
        finished = [(row, values) for row, values in self.rows() if row is not None]
        a.writerow(["run_id", "method", *(["task"] if self.per_task else []), "length", self.metric])
        for row, values in finished:
            w.writerow(["" if row[c] is None else row[c] for c in columns])
            for method, length, value, *task in values:
                a.writerow([row["run_id"], method, *task, length,
                            "" if value is None or (isinstance(value, float) and math.isnan(value)) else value])
        io.write_text(self.sweep.path / RESULTS, table.getvalue())
        io.write_text(self.sweep.path / BY_LENGTH, long.getvalue())
        return len(finished)
