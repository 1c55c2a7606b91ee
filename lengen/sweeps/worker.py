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
from lengen.sweeps.sweep_dir import RunLock, SweepDir

PROGRESS_EVERY_S = 2.0  # progress.json is rewritten at most this often


def _log(sweep: SweepDir, run_id: str, line: str) -> None:
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    path = sweep.log_file(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(f"[{stamp}] {line}\n")


def job(spec, run) -> dict:
    """What a worker needs to execute one run of `spec`: plain data, so it pickles to any process."""
    return {"kind": spec.command, "config": run.config.to_dict(), "eval": spec.evaluation,
            "done_file": spec.kind.done_file(spec.evaluation)}


def execute(sweep_path: str, run_id: str, job: dict, device: str) -> dict:
    """Train and evaluate run `run_id` of the sweep in `sweep_path` on `device` (`job` from
    `job()`). Returns {"run_id", "status": done | failed | busy | skipped, "error"?, "seconds"}."""
    sweep = SweepDir(sweep_path, job["done_file"])
    lock = RunLock(sweep.state_file(run_id, "lock"))
    if not lock.acquire():
        return {"run_id": run_id, "status": "busy", "seconds": 0.0}  # another sweep process runs it
    start = time.perf_counter()
    try:
        result = _attempt(sweep, run_id, job, device)
    finally:
        lock.release()
    return {"run_id": run_id, **result, "seconds": round(time.perf_counter() - start, 3)}


def _attempt(sweep: SweepDir, run_id: str, job: dict, device: str) -> dict:
    from lengen.sweeps.kinds import KINDS

    kind = KINDS[job["kind"]]
    path = sweep.run_path(run_id)
    if sweep.state(run_id) == "done":
        return {"status": "skipped"}
    cfg = kind.config_from_dict(job["config"])
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
    except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
        error = " ".join(f"{type(e).__name__}: {e}".split())
        io.write_json(sweep.state_file(run_id, "failure.json"), {"error": error, "type": type(e).__name__,
                                              "time": datetime.datetime.now().isoformat(timespec="seconds")})
        _log(sweep, run_id, f"failed: {error}\n{traceback.format_exc()}")
        return {"status": "failed", "error": error}
    sweep.state_file(run_id, "failure.json").unlink(missing_ok=True)
    sweep.state_file(run_id, "progress.json").unlink(missing_ok=True)  # progress is for runs in training
    _log(sweep, run_id, f"finished: {summary}")
    return {"status": "done"}
