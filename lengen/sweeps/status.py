"""`lengen sweep status`: what a sweep folder holds, read from its run directories."""

from __future__ import annotations

from lengen.errors import LengenError
from lengen.sweeps.spec import expand, parse_spec
from lengen.sweeps.sweep_dir import STATES, SweepDir


def resumable(sweep: SweepDir, run_id: str, state: str) -> bool:
    """Whether a run of state `state` is one `sweep run` resumes rather than starts: pending, with
    a checkpoint. The one rule for `sweep status` and the summary `sweep run` ends with."""
    return state == "pending" and (sweep.run_path(run_id) / "checkpoint.pt").exists()


def sweep_status(path) -> dict:
    """{"name", "total", "counts": {state: n}, "failed": [{run_id, point, error, log}],
    "running": [{run_id, step, steps}], "damaged": [{run_id, point, problem}] runs whose done file
    cannot be counted (the next `sweep run` evaluates them again), "resumable": n pending runs that
    hold a checkpoint,
    "runner": who runs the sweep now ("pid N on HOST since T") or None,
    "outside": [{run_id, done}] run directories not in the grid (an earlier sweep file's)}."""
    index = SweepDir(path).read_index()
    try:
        spec = parse_spec(index["spec"], where=str(path))
    except LengenError:  # a file this lengen no longer reads: CHE's done file
        sweep = SweepDir(path)
    else:
        try:  # each run's results are checked against its config in the sweep (as `report` does)
            configs = {r.run_id: r.config for r in expand(spec)}
        except LengenError:  # runs that no longer build here: against their own config.json
            configs = None
        sweep = SweepDir(path, spec.kind.done_file(spec.evaluation), spec.kind, spec.evaluation, configs)
    counts = {s: 0 for s in STATES}
    failed, running, damaged, resuming = [], [], [], 0
    for run in index["runs"]:
        rid = run["run_id"]
        state = sweep.state(rid)
        counts[state] += 1
        if state == "failed":
            info = sweep.failure(rid) or {}
            failed.append({"run_id": rid, "point": run["point"], "error": info.get("error", "?"),
                           "log": str(sweep.log_file(rid))})
        elif state == "damaged":
            damaged.append({"run_id": rid, "point": run["point"], "problem": sweep.damage(rid)})
        elif state == "running":
            p = sweep.progress(rid) or {}
            running.append({"run_id": rid, "step": p.get("step"), "steps": p.get("steps")})
        elif resumable(sweep, rid, state):
            resuming += 1
    return {"name": index["name"], "total": len(index["runs"]), "counts": counts, "failed": failed,
            "damaged": damaged,
            "running": running, "resumable": resuming, "runner": sweep.runner(),
            "outside": [{"run_id": rid, "done": sweep.is_done(rid)}
                        for rid in sweep.outside(r["run_id"] for r in index["runs"])]}
