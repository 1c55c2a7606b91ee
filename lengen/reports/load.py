"""A sweep folder of any kind as two DataFrames: every planned run (finished or not, from the
sweep's own file) with its results where it has them, and the finished runs' values by length.
Read from the run directories through the sweep's results writer (lengen.sweeps.results), so a
report is right even when the tables in the folder are older than the runs; an export folder
(lengen.sweeps.export: the tables without the run directories) is read from its tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lengen.errors import LengenError
from lengen.sweeps.export import check_export, is_export
from lengen.sweeps.results import ResultsWriter
from lengen.sweeps.spec import expand, parse_spec
from lengen.sweeps.sweep_dir import SweepDir


@dataclass
class SweepData:
    name: str
    path: Path
    spec_text: str
    kind: str                # the sweep's `command:` (lengen.sweeps.kinds): train or lm
    evaluation: dict         # its `eval:` section ({} when it has none)
    runs: pd.DataFrame       # one row per planned run: results.csv's columns (empty until the run
                             # finished) and `done`
    values: pd.DataFrame     # the finished runs' values by length: the long table's columns
    configs: list            # each planned run's config, in the order of `runs`
    points: list = field(default_factory=list)    # each planned run's grid point, in the same order
    damaged: dict = field(default_factory=dict)   # run id -> why its done file is not counted (SweepDir.damage)


def _index(path) -> dict:
    if not Path(path).is_dir():
        raise LengenError(f"{path} is not a folder; give a folder written by `lengen sweep run`")
    return SweepDir(path).read_index()


def sweep_command(path) -> str:
    """The `command:` of the sweep in folder `path` (train or lm); LengenError when it holds none."""
    spec = _index(path)["spec"]
    return spec.get("command", "train") if isinstance(spec, dict) else "train"


def load_sweep(path) -> SweepData:
    index = _index(path)
    try:
        spec = parse_spec(index["spec"], where=str(Path(path) / SweepDir.INDEX))
        runs = expand(spec)
    except LengenError as e:
        raise LengenError(f"{path}: its sweep no longer expands with this lengen ({e})") from None
    sweep = SweepDir(path, spec.kind.done_file(spec.evaluation), spec.kind, spec.evaluation,
                     {r.run_id: r.config for r in runs})
    writer = ResultsWriter(sweep, runs, spec.kind, spec.evaluation)
    if is_export(path):
        rows, by_length = _exported(sweep.path, spec, runs, writer)
    else:
        rows, values = [], []
        for run, (row, run_values) in zip(runs, writer.rows()):
            rows.append({**(row if row is not None else writer.config_row(run)), "done": row is not None})
            values.extend((run.run_id, *v) for v in run_values or ())
        by_length = pd.DataFrame(values, columns=writer.by_length_columns)
    frame = pd.DataFrame(rows)
    for column in writer.columns:  # no run has finished yet
        if column not in frame:
            frame[column] = None
    spec_file = sweep.path / SweepDir.SPEC
    return SweepData(name=spec.name, path=sweep.path, spec_text=spec_file.read_text() if spec_file.exists() else "",
                     kind=spec.command, evaluation=spec.evaluation or {}, runs=frame,
                     values=by_length, configs=[r.config for r in runs], points=[r.point for r in runs],
                     damaged={} if is_export(path) else
                     {r.run_id: why for r in runs if (why := sweep.damage(r.run_id)) is not None})


def _exported(path: Path, spec, runs, writer: ResultsWriter) -> tuple[list[dict], pd.DataFrame]:
    """The rows and values of an export folder (lengen.sweeps.export): its tables, not run directories."""
    results, by_length = spec.kind.tables
    check_export(path)   # a damaged table is named, not read as far as it goes
    try:
        table = pd.read_csv(path / results, dtype={"run_id": str})
        values = pd.read_csv(path / by_length, dtype={"run_id": str})
    except (OSError, ValueError) as e:
        raise LengenError(f"{path}: its exported tables cannot be read ({e}); export the sweep again") from None
    finished = {r["run_id"]: r for r in table.to_dict("records")}
    rows = [{**finished[run.run_id], "done": True} if run.run_id in finished
            else {**writer.config_row(run), "done": False} for run in runs]
    return rows, values[list(writer.by_length_columns)]
