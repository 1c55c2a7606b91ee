"""`lengen sweep run`: expand and check the sweep, claim its folder, run what is not done on the
chosen backend with one progress bar over runs, rebuild the results tables."""

from __future__ import annotations

import datetime
import os
import time
from dataclasses import dataclass

import torch

from lengen import io
from lengen.devices import resolve_device
from lengen.errors import LengenError
from lengen.formatting import count_noun
from lengen.progress import progress_bar
from lengen.sweeps.spec import SweepSpec, expand
from lengen.sweeps.status import resumable
from lengen.sweeps.grouping import default_group_size, plan_groups
from lengen.sweeps.local import run_local
from lengen.sweeps.ray_backend import connect, run_ray
from lengen.sweeps.results import ResultsWriter
from lengen.sweeps.sweep_dir import SweepDir
from lengen.sweeps.worker import job

REBUILD_EVERY_S = 60.0  # results tables are rebuilt this often during a sweep, and at its end


@dataclass
class SweepOptions:
    backend: str = "local"          # local | ray
    device: str = "auto"            # auto | cpu | cuda | cuda:N
    workers: int | None = None      # local: processes (default: cores // threads, or K per GPU)
    threads: int | None = None      # torch threads per run (default 1 on the CPU)
    runs_per_gpu: int = 8           # runs sharing each GPU (8: 5.4x one run on an H100, docs/sweeps.md)
    group_size: int | None = None   # runs trained together in one process (None: per device, lengen.sweeps.grouping)
    ray_address: str | None = None
    progress: bool = True
    reuse: str | None = None        # another sweep folder whose runs of the same ids are copied in first
    time_limit: float | None = None  # minutes: then no run starts and training checkpoints and stops

    def validate(self) -> None:
        if self.backend not in ("local", "ray"):
            raise LengenError(f"unknown backend {self.backend!r}; valid: local, ray")
        for name in ("workers", "threads", "runs_per_gpu", "group_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise LengenError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        if self.time_limit is not None and not 0 < self.time_limit < float("inf"):
            raise LengenError(f"--time-limit must be a positive number of minutes, got {self.time_limit}")


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def plan_devices(spec: str) -> list[str]:
    """The devices the local workers are spread over."""
    device = resolve_device(spec)  # a missing GPU fails here, before anything is written
    if device.type == "cpu":
        return ["cpu"]
    if spec.strip().lower() in ("auto", "cuda"):
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return [str(device)]


def plan_workers(opts: SweepOptions, devices: list[str]) -> tuple[int, int]:
    """(workers, threads per worker) for the local backend."""
    cores = cpu_count()
    if devices == ["cpu"]:
        threads = opts.threads or 1
        return opts.workers or max(1, cores // threads), threads
    workers = opts.workers or opts.runs_per_gpu * len(devices)
    return workers, opts.threads or max(1, cores // workers)


@dataclass
class SweepPlan:
    """A sweep that passed every check a run makes before it writes anything."""

    runs: list
    sweep: SweepDir
    devices: list[str]
    workers: int | None
    threads: int


def check_sweep(spec: SweepSpec, out, opts: SweepOptions) -> SweepPlan:
    """Every check `sweep run` makes before it writes anything (`--dry-run` stops here): options,
    the whole file, the folder, the device (or the Ray cluster), another runner on the folder."""
    opts.validate()
    runs = expand(spec)  # every problem of the file, before anything is written
    sweep = SweepDir(out, spec.kind.done_file(spec.evaluation), spec.kind, spec.evaluation,
                     {r.run_id: r.config for r in runs})
    sweep.check_writable()
    io.check_writable(sweep.path, "choose another --out (a finished sweep can be read where it is: "
                      "`lengen sweep status`, `lengen report --out ELSEWHERE`)")
    if opts.backend == "local":
        devices = plan_devices(opts.device)
        workers, threads = plan_workers(opts, devices)
    else:
        connect(opts.ray_address)  # Ray missing or unreachable: one line, nothing written
        devices, workers, threads = [opts.device], None, opts.threads or 1
    holder = sweep.runner()
    if holder:
        raise sweep.busy(holder)
    if opts.reuse is not None:
        source = SweepDir(opts.reuse, sweep.done_file)
        if not source.exists:
            raise LengenError(f"--reuse {opts.reuse}: not a lengen sweep folder (no {SweepDir.INDEX})")
        if source.path.resolve() == sweep.path.resolve():
            raise LengenError("--reuse names the sweep's own folder: give another sweep's folder")
    return SweepPlan(runs, sweep, devices, workers, threads)


def dependency_waves(todo: list, sequential: bool) -> list[list]:
    """The runs to run, as waves run one after another: a run that starts from another's weights
    (SweepRun.after) must come after it. One worker runs its jobs in order, so one wave in grid
    order with each such run moved just after its source (a part-run sweep has whole seeds);
    parallel workers get a second wave, started once every run of the first has had its turn.
    A run whose source did not finish then fails, saying so."""
    pending = {r.run_id for r in todo}
    later = [r for r in todo if r.after in pending]
    first = [r for r in todo if r.after not in pending]
    if not sequential:
        return [first, later]
    ordered = []
    for r in first:
        ordered += [r, *(d for d in later if d.after == r.run_id)]
    return [ordered, []]


def run_sweep(spec: SweepSpec, out, opts: SweepOptions) -> dict:
    """Run every unfinished run of `spec` in `out`; returns the counts by state."""
    plan = check_sweep(spec, out, opts)
    claim = plan.sweep.claim_runner()   # a second runner on this folder stops here, told who runs it
    try:
        return _run_claimed(spec, plan, opts)
    finally:
        claim.release()


def _run_claimed(spec: SweepSpec, plan: SweepPlan, opts: SweepOptions) -> dict:
    runs, sweep, devices, workers, threads = plan.runs, plan.sweep, plan.devices, plan.workers, plan.threads
    sweep.check_writable(claimed=True)   # again, now that no other runner can change the folder
    kept = sweep.write_index(spec, runs)
    adopted = sweep.adopt(SweepDir(opts.reuse), [r.run_id for r in runs]) if opts.reuse else []
    outside = sweep.outside(r.run_id for r in runs)
    states = {r.run_id: sweep.state(r.run_id) for r in runs}
    busy = [rid for rid, s in states.items() if s == "running"]
    if busy:
        raise LengenError(f"{len(busy)} runs of this sweep are running in another process (e.g. "
                          f"{busy[0]}); wait for it or stop it first")
    todo = [r for r in runs if states[r.run_id] != "done"]
    size = opts.group_size or (default_group_size(devices) if opts.backend == "local" else 1)
    stop_at = None if opts.time_limit is None else time.time() + 60 * opts.time_limit
    waves = dependency_waves(todo, sequential=opts.backend == "local" and workers == 1)
    waves = [[{**job(spec, group), "stop_at": stop_at} for group in plan_groups(wave, spec.command, sweep, size)]
             for wave in waves]
    jobs = [j for wave in waves for j in wave]
    writer = ResultsWriter(sweep, runs, spec.kind, spec.evaluation)
    counts = {"done": len(runs) - len(todo), "failed": 0, "stopped": 0}
    where = (f"{count_noun(workers, 'worker')} x {count_noun(threads, 'thread')} on {', '.join(devices)}" if opts.backend == "local"
             else f"Ray ({opts.ray_address or os.environ.get('RAY_ADDRESS') or 'local instance'})")
    grouped = f", in {len(jobs)} groups of up to {size}" if len(jobs) < len(todo) else ""
    print(f"sweep {spec.name}: {len(runs)} runs, {counts['done']} done, {len(todo)} to run{grouped} ({where})")
    if kept is not None:
        print(f"the sweep file changed: the previous one is kept in {kept}")
    if opts.reuse:
        print(f"--reuse: {len(adopted)} runs of the same configuration copied from {opts.reuse}")
    for rid in [rid for rid, s in states.items() if s == "damaged"]:
        again = "evaluated again from its checkpoint" if (sweep.run_path(rid) / "checkpoint.pt").exists() \
            else "trained again (no checkpoint)"
        print(f"run {rid}: {sweep.damage(rid)}; not counted as done: it is {again}")
    if outside:
        finished = sum(sweep.is_done(rid) for rid in outside)
        print(f"{len(outside)} runs in {sweep.path / 'runs'} ({finished} finished) are not in this grid and "
              f"not in its results; `lengen sweep status` lists them, `lengen sweep prune` removes them")
    bar = progress_bar(len(runs), f"sweep {spec.name}", disable=not opts.progress, initial=counts["done"],
                       unit="run")
    active = {r.run_id for r in todo}
    last_write = [time.monotonic()]

    def on_result(result: dict) -> None:
        rid, status = result["run_id"], result["status"]
        active.discard(rid)
        if status in ("done", "skipped"):
            counts["done"] += 1
            bar.update(1)
        elif status == "stopped":   # the time limit: a checkpoint, or not started
            counts["stopped"] += 1
        elif status == "failed":
            counts["failed"] += 1
            if not sweep.state_file(rid, "failure.json").exists():  # the worker died; Ray gave up
                io.write_json(sweep.state_file(rid, "failure.json"), {
                    "error": result.get("error", "worker died"), "type": "WorkerDied",
                    "time": datetime.datetime.now().isoformat(timespec="seconds")})
            bar.write(f"run {rid} failed: {result.get('error')} (log: {sweep.log_file(rid)})")

    def on_tick() -> None:
        shown = []
        # only runs that are training have a progress file (a finished run's is removed)
        for rid in sorted(f.name.split(".")[0] for f in sweep.path.glob("state/*.progress.json")):
            p = sweep.progress(rid) if rid in active else None
            if p is not None and p.get("step", 0) < p.get("steps", 0):
                shown.append(f"{rid[:6]} {p['step']}/{p['steps']}")
        bar.set_postfix_str(" | ".join(shown[:4]) + (f" +{len(shown) - 4}" if len(shown) > 4 else ""))
        if time.monotonic() - last_write[0] > REBUILD_EVERY_S:
            writer.write()
            last_write[0] = time.monotonic()

    try:
        for wave in filter(None, waves):
            if opts.backend == "local":
                run_local(wave, str(sweep.path.resolve()), workers, threads, devices, on_result, on_tick)
            else:
                run_ray(wave, str(sweep.path.resolve()), opts.ray_address, opts.device, threads,
                        opts.runs_per_gpu, on_result, on_tick)
    finally:
        bar.close()
        finished = writer.write()
    counts["pending"] = len(runs) - counts["done"] - counts["failed"]
    counts["resumable"] = sum(resumable(sweep, r.run_id, sweep.state(r.run_id)) for r in runs)
    counts["results"] = finished
    return counts
