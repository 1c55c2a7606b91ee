"""A language-model sweep folder (`command: lm`) as DataFrames for lengen.reports.lm_build: every
planned run (finished or not) with its results where it has them, and the evaluation values of the
finished runs in long form. Read from the run directories, like lengen.reports.load for CHE."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lengen.sweeps.lm_results import metric_of


@dataclass
class LMSweepData:
    name: str
    path: Path
    spec_text: str
    protocol: str
    metric: str              # ppl | accuracy
    runs: pd.DataFrame       # one row per planned run; `done` tells which finished
    values: pd.DataFrame     # run_id, method, length, <metric> (finished runs)


def load_lm_sweep(sweep, spec, runs) -> LMSweepData:
    """`sweep` a SweepDir, `spec` its parsed SweepSpec (command: lm), `runs` its expansion."""
    protocol = (spec.evaluation or {}).get("protocol", "ppl")
    metric = metric_of(protocol)
    writer = spec.kind.results_writer(sweep, runs, spec.evaluation)
    rows, values = [], []
    for run, (row, pairs) in zip(runs, writer.rows()):
        if row is None:
            rows.append({**writer.config_row(run), "done": False})
            continue
        rows.append({**row, "done": True})
        values.extend((run.run_id, m, n, v, *task) for m, n, v, *task in pairs)
    frame = pd.DataFrame(rows)
    for col in ("train_loss", "val_ppl", "seconds"):
        frame[col] = frame[col].astype(float) if col in frame else float("nan")
    spec_file = sweep.path / "sweep.yaml"
    columns = ["run_id", "method", "length", metric] + (["task"] if writer.per_task else [])
    values = pd.DataFrame(values, columns=columns)
    if writer.per_task:  # RULER's score of a run: the mean over its tasks (a task too long is NaN)
        values = values.groupby(["run_id", "method", "length"], as_index=False, sort=False)[metric].mean()
    return LMSweepData(name=spec.name, path=sweep.path, spec_text=spec_file.read_text() if spec_file.exists() else "",
                       protocol=protocol, metric=metric, runs=frame, values=values)
