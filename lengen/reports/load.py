"""A sweep folder as two DataFrames: every planned run (finished or not, from the sweep's own
file) with its results where it has them, and the accuracy of finished runs by length. Read
from the run directories, so a report is right even when results.csv is older than the runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lengen.errors import LengenError
from lengen.sweeps.results import ResultsWriter
from lengen.sweeps.spec import expand, parse_spec
from lengen.sweeps.sweep_dir import SweepDir


@dataclass
class SweepData:
    name: str
    path: Path
    spec_text: str
    runs: pd.DataFrame       # one row per planned run; `done` and `score` tell which finished
    accuracy: pd.DataFrame   # run_id, length, accuracy (finished runs)


def load_sweep(path) -> SweepData:
    sweep = SweepDir(path)
    if not Path(path).is_dir():
        raise LengenError(f"{path} is not a folder; give a folder written by `lengen sweep run`")
    index = sweep.read_index()
    try:
        runs = expand(parse_spec(index["spec"], where=str(sweep.path / SweepDir.INDEX)))
    except LengenError as e:
        raise LengenError(f"{sweep.path}: its sweep no longer expands with this lengen ({e})") from None
    writer = ResultsWriter(sweep, runs)
    rows, acc = [], []
    for run, (row, pairs) in zip(runs, writer.rows()):
        if row is None:
            rows.append({**writer.config_row(run), "done": False})
            continue
        rows.append({**row, "done": True})
        acc.extend((run.run_id, n, a) for n, a in pairs)
    frame = pd.DataFrame(rows)
    frame["model"] = [run.config.model.architecture for run in runs]  # a recurrent run's column label
    for col in ("score", "seconds", "train_seconds", "eval_seconds", "accuracy_in_train_range", "test_positions"):
        if col not in frame:
            frame[col] = None
    frame["score"] = frame["score"].astype(float)
    frame["seconds"] = frame["seconds"].astype(float)
    spec_file = sweep.path / SweepDir.SPEC
    return SweepData(name=index["name"], path=sweep.path,
                     spec_text=spec_file.read_text() if spec_file.exists() else "",
                     runs=frame, accuracy=pd.DataFrame(acc, columns=["run_id", "length", "accuracy"]))
