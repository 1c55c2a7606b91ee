"""A sweep's results without its run directories: the small files a repository can keep so that
anyone can rebuild the report (`lengen report` reads an export folder as it reads a sweep folder)
and see what computed every number. `lengen sweep export SWEEP_DIR --out DIR` writes:

    DIR/export.json         the sweep's name and kind, runs planned and finished, and each table's
                            number of rows (`rows`), so a table cut short is found before it is reused
    DIR/sweep.yaml          the sweep file, and sweep.json (its runs, ids and grid points)
    DIR/results.csv         one row per finished run, as in the sweep folder
    DIR/<values by length>  accuracy_by_length.csv (CHE) or ppl_by_length.csv (language models)
    DIR/environment.csv     per finished run: the lengen commit, Python, torch, transformers,
                            device, CPU threads and CPU kernels (cpu_capability) it ran with
                            (its eval.json's `environment`; empty for runs that predate a field)

No checkpoints, logs or run directories. The tables are rebuilt from the run directories (the
sweep's own results writer), so an export is right even when the sweep folder's tables are stale.

An export accumulates: exporting into an earlier export keeps the runs it holds that the sweep
folder has not finished (a run id hashes the run's whole config, so the same id is the same run).
Its sweep file stays when it plans every run of the folder's (a study finished in parts, each part
a sweep file over some seeds); otherwise the folder's sweep file replaces it, keeping the earlier
runs it still plans. The environment of each run says where and with what it ran.
"""

from __future__ import annotations

import csv
import io as _io
from pathlib import Path

from lengen import io
from lengen.errors import LengenError, reason
from lengen.sweeps.results import ResultsWriter
from lengen.sweeps.spec import expand, parse_spec
from lengen.sweeps.sweep_dir import SweepDir

MARKER = "export.json"
ENVIRONMENT = "environment.csv"
ENVIRONMENT_COLUMNS = ("run_id", "lengen", "lengen_commit", "python", "torch", "torch_cuda_build", "transformers",
                       "device", "gpu", "threads", "cpu_capability")


def is_export(path) -> bool:
    return (Path(path) / MARKER).is_file()


def _environment(path: Path, done_file: str) -> dict:
    """A finished run's `environment` record: in its done file, else in its eval.json."""
    for name in (done_file, "eval.json"):
        try:
            env = io.read_json(path / name).get("environment")
        except (OSError, ValueError):
            continue
        if env:
            return env
    return {}


def _rows(path: Path) -> list[list[str]]:
    """A table's lines as cells, its header first; ValueError when it is not whole: not ending in a
    line break (cut short), or a row of another width than its header."""
    text = path.read_text()
    rows = list(csv.reader(_io.StringIO(text)))
    if text and not text.endswith("\n") or any(len(r) != len(rows[0]) for r in rows):
        raise ValueError("cut short, or a row of another width than its header")
    return rows


def check_export(path) -> None:
    """Refuse (LengenError naming the file) an export folder a file of which is not whole: its
    export.json or sweep.json not JSON, or a table cut short (see `_rows`), or with fewer or more
    rows than export.json records (results.csv: its `finished` runs). A table edited by hand, row
    for row, is read as it is. Nothing in an export can be rebuilt from elsewhere."""
    path = Path(path)

    def damaged(name: str, why: str) -> LengenError:
        return LengenError(f"{path / name} is damaged ({why}); an export cannot be rebuilt from itself: export "
                           "the sweep folder again, into a new folder")

    records = {}
    for name in (MARKER, SweepDir.INDEX):
        try:
            records[name] = io.read_json(path / name)
        except (OSError, ValueError) as e:
            raise damaged(name, reason(e)) from None
        if not isinstance(records[name], dict):
            raise damaged(name, "not a JSON object")
    marker = records[MARKER]
    counts = marker.get("rows") or {}
    for name in sorted({*counts, *(p.name for p in path.glob("*.csv"))}):
        try:
            rows = _rows(path / name)
        except OSError as e:
            raise damaged(name, e.strerror or str(e)) from None
        except ValueError as e:
            raise damaged(name, str(e)) from None
        expected = counts.get(name, marker.get("finished") if name == "results.csv" else None)
        if expected is not None and len(rows) - 1 != expected:
            raise damaged(name, f"{len(rows) - 1} rows where the export wrote {expected}")


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _earlier(out: Path):
    """An earlier export in `out`: (index, sweep file text, spec, runs, rows by run id, long rows
    (less the run id) by run id, environment by run id), its cells as the CSV texts they were;
    None when it no longer expands with this lengen. LengenError when a file of it is damaged."""
    check_export(out)
    index = io.read_json(out / SweepDir.INDEX)
    try:
        spec = parse_spec(index["spec"], where=str(out / SweepDir.INDEX))
    except LengenError:
        return None
    results, by_length = spec.kind.tables
    rows = {r["run_id"]: r for r in _csv_rows(out / results)}
    values: dict = {}
    for r in _csv_rows(out / by_length):
        values.setdefault(r["run_id"], []).append(tuple(v for k, v in r.items() if k != "run_id"))
    env = {r["run_id"]: {k: v for k, v in r.items() if v != ""} for r in _csv_rows(out / ENVIRONMENT)}
    return index, (out / SweepDir.SPEC).read_text(), spec, expand(spec), rows, values, env


def export_sweep(sweep_path, out) -> dict:
    """Write the export of the sweep in `sweep_path` into folder `out`. Returns name, planned,
    finished, and `damaged`: run id -> why its results were not read back (SweepDir.damage), for
    the runs left out for it. Refuses (LengenError) an `out` that is a sweep folder or the sweep
    itself."""
    sweep_path, out = Path(sweep_path), Path(out)
    if not (sweep_path / SweepDir.INDEX).is_file():
        raise LengenError(f"{sweep_path} is not a lengen sweep folder (no {SweepDir.INDEX}); "
                          "give a folder written by `lengen sweep run`")
    if is_export(sweep_path):
        raise LengenError(f"{sweep_path} is already an export; export the sweep folder it came from")
    if out.resolve() == sweep_path.resolve() or ((out / SweepDir.INDEX).exists() and not is_export(out)):
        raise LengenError(f"{out} is a sweep folder; export into a new folder (or an earlier export)")
    io.check_writable(out)
    index, spec_text = SweepDir(sweep_path).read_index(), (sweep_path / SweepDir.SPEC).read_text()
    spec = parse_spec(index["spec"], where=str(sweep_path / SweepDir.INDEX))
    runs = expand(spec)
    known, known_env = {}, {}
    if is_export(out):
        earlier = _earlier(out)
        if earlier is not None:
            e_index, e_text, e_spec, e_runs, rows, values, known_env = earlier
            if e_spec.kind is spec.kind and {r.run_id for r in runs} <= {r.run_id for r in e_runs}:
                index, spec_text, spec, runs = e_index, e_text, e_spec, e_runs
            known = {rid: (row, values.get(rid, [])) for rid, row in rows.items()}
    sweep = SweepDir(sweep_path, spec.kind.done_file(spec.evaluation), spec.kind, spec.evaluation,
                     {r.run_id: r.config for r in runs})
    writer = ResultsWriter(sweep, runs, spec.kind, spec.evaluation, known)

    out.mkdir(parents=True, exist_ok=True)
    finished = writer.write(into=out)
    text = _io.StringIO()
    w = csv.writer(text, lineterminator="\n")
    w.writerow(ENVIRONMENT_COLUMNS)
    for run, (row, _) in zip(runs, writer.rows()):
        if row is not None:
            env = _environment(sweep.run_path(run.run_id), sweep.done_file) if sweep.is_done(run.run_id) \
                else known_env.get(run.run_id, {})
            w.writerow([run.run_id, *("" if env.get(c) is None else env[c] for c in ENVIRONMENT_COLUMNS[1:])])
    io.write_text(out / ENVIRONMENT, text.getvalue())
    io.write_text(out / SweepDir.SPEC, spec_text)
    io.write_json(out / SweepDir.INDEX, index)
    made = {"sweep": spec.name, "kind": spec.command, "planned": len(runs), "finished": finished,
            "rows": {name: len(_rows(out / name)) - 1 for name in (*spec.kind.tables, ENVIRONMENT)}}
    io.write_json(out / MARKER, made)   # last: a folder with it is a whole export
    # runs whose results could not be read back are left out, not silently: the caller names them
    return {**made, "damaged": {r.run_id: why for r in runs
                                if r.run_id not in known and (why := sweep.damage(r.run_id)) is not None}}
