"""One sweep run in the current process: lock it, train or resume it, record the outcome. A run's
own failure (an exception, diverged training) is recorded and returned, never raised, so one bad
run does not stop a sweep; rerunning the sweep retries it from its last checkpoint."""

from __future__ import annotations

import datetime
import os
import socket
import time
import traceback

from lengen import io
from lengen.sweeps.kinds import KINDS
from lengen.sweeps.sweep_dir import RunLock, SweepDir
from lengen.che.config import TrainConfig
from lengen.training import deadline
from lengen.che.group import train_group

PROGRESS_EVERY_S = 2.0  # progress.json is rewritten at most this often


def _log(sweep: SweepDir, run_id: str, line: str) -> None:
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    path = sweep.log_file(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(f"[{stamp}] {line}\n")


def job(spec, runs) -> dict:
    """What a worker needs to execute one run of `spec`, or a group of runs trained together
    (lengen.che.group): plain data, so it pickles to any process."""
    return {"kind": spec.command, "runs": [{"run_id": r.run_id, "config": r.config.to_dict()} for r in runs],
            "eval": spec.evaluation, "done_file": spec.kind.done_file(spec.evaluation)}


def _sweep_dir(sweep_path: str, job: dict) -> SweepDir:
    """The sweep folder as a worker sees it: a done file counts when it is its run's (SweepDir.damage)."""
    kind = KINDS[job["kind"]]
    return SweepDir(sweep_path, job["done_file"], kind, job["eval"],
                    {r["run_id"]: kind.config_from_dict(r["config"]) for r in job["runs"]})


def run_job(sweep_path: str, job: dict, device: str) -> list[dict]:
    """Execute a job (one run or a group) on `device`; one result per run. Past the job's
    `stop_at` (`--time-limit`) nothing starts, and training in progress checkpoints and stops:
    status "stopped"."""
    with deadline.deadline(job.get("stop_at")):
        if deadline.passed():
            return [{"run_id": r["run_id"], "status": "stopped", "seconds": 0.0} for r in job["runs"]]
        if len(job["runs"]) == 1:
            return [execute(sweep_path, job["runs"][0]["run_id"], job, device)]
        return execute_group(sweep_path, job, device)


def execute(sweep_path: str, run_id: str, job: dict, device: str) -> dict:
    """Train and evaluate run `run_id` of the sweep in `sweep_path` on `device`. Returns
    {"run_id", "status": done | failed | stopped | busy | skipped, "error"?, "seconds"}."""
    sweep = _sweep_dir(sweep_path, job)
    lock = RunLock(sweep.state_file(run_id, "lock"))
    if not lock.acquire():
        return {"run_id": run_id, "status": "busy", "seconds": 0.0}  # another sweep process runs it
    start = time.perf_counter()
    try:
        config = next(r["config"] for r in job["runs"] if r["run_id"] == run_id)
        result = _attempt(sweep, run_id, config, job, device)
    finally:
        lock.release()
    return {"run_id": run_id, **result, "seconds": round(time.perf_counter() - start, 3)}


def execute_group(sweep_path: str, job: dict, device: str) -> list[dict]:
    """Train the runs of `job` together (lengen.che.group.train_group): the members this
    process can lock and that are not done; each keeps its own run directory, log and outcome."""
    sweep = _sweep_dir(sweep_path, job)
    results, members, locks = [], [], []
    for r in job["runs"]:
        lock = RunLock(sweep.state_file(r["run_id"], "lock"))
        if not lock.acquire():
            results.append({"run_id": r["run_id"], "status": "busy", "seconds": 0.0})
        elif sweep.is_done(r["run_id"]):
            lock.release()
            results.append({"run_id": r["run_id"], "status": "skipped", "seconds": 0.0})
        else:
            locks.append(lock)
            members.append(r)
    start = time.perf_counter()
    try:
        if members:
            ids = [m["run_id"] for m in members]
            cfgs = [TrainConfig.from_dict(m["config"]) for m in members]
            for cfg in cfgs:
                cfg.device = device
            for rid in ids:
                _log(sweep, rid, f"{'resume' if (sweep.run_path(rid) / 'checkpoint.pt').exists() else 'start'} in a "
                     f"group of {len(ids)} on {socket.gethostname()} pid {os.getpid()} device {device}")
            error, stopped = None, None
            try:
                train_group(cfgs, [sweep.run_path(rid) for rid in ids], progress=False)
            except deadline.DeadlineReached as e:
                stopped = str(e)
            except Exception as e:  # noqa: BLE001 - recorded per member, the sweep goes on
                error = " ".join(f"{type(e).__name__}: {e}".split())
                trace = traceback.format_exc()
            seconds = round(time.perf_counter() - start, 3)
            for rid in ids:
                if stopped is not None and not sweep.is_done(rid):
                    _log(sweep, rid, stopped)
                    results.append({"run_id": rid, "status": "stopped", "seconds": seconds})
                elif sweep.is_done(rid):  # a diverged member does not fail the others
                    _finished(sweep, rid)
                    score = io.read_json(sweep.run_path(rid) / "eval.json").get("score")
                    _log(sweep, rid, f"finished: score {score} (in a group of {len(ids)})")
                    results.append({"run_id": rid, "status": "done", "seconds": seconds})
                else:
                    _failed(sweep, rid, error or "no evaluation written", error and trace)
                    results.append({"run_id": rid, "status": "failed", "error": error, "seconds": seconds})
    finally:
        for lock in locks:
            lock.release()
    return results


def _failed(sweep: SweepDir, run_id: str, error: str, trace: str | None) -> None:
    io.write_json(sweep.state_file(run_id, "failure.json"), {"error": error, "type": error.split(":")[0],
                  "time": datetime.datetime.now().isoformat(timespec="seconds")})
    _log(sweep, run_id, f"failed: {error}" + (f"\n{trace}" if trace else ""))


def _finished(sweep: SweepDir, run_id: str) -> None:
    sweep.state_file(run_id, "failure.json").unlink(missing_ok=True)
    sweep.state_file(run_id, "progress.json").unlink(missing_ok=True)  # progress is for runs in training


def _attempt(sweep: SweepDir, run_id: str, config: dict, job: dict, device: str) -> dict:
    kind = KINDS[job["kind"]]
    path = sweep.run_path(run_id)
    if sweep.is_done(run_id):  # state() would probe the lock this process holds
        return {"status": "skipped"}
    cfg = kind.config_from_dict(config)
    cfg.device = device
    resumed = (path / "checkpoint.pt").exists()
    _log(sweep, run_id, f"{'resume' if resumed else 'start'} on {socket.gethostname()} pid {os.getpid()} "
               f"device {device}")
    last = [0.0]

    def on_log(step: int, row: dict) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S or step == cfg.steps:
            last[0] = now
            io.write_json(sweep.state_file(run_id, "progress.json"), {**row, "steps": cfg.steps})

    try:
        summary = kind.execute(path, cfg, job["eval"], job["done_file"], on_log)
    except deadline.DeadlineReached as e:
        _log(sweep, run_id, str(e))
        return {"status": "stopped"}
    except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
        error = " ".join(f"{type(e).__name__}: {e}".split())
        _failed(sweep, run_id, error, traceback.format_exc())
        return {"status": "failed", "error": error}
    _finished(sweep, run_id)
    _log(sweep, run_id, f"finished: {summary}")
    return {"status": "done"}
