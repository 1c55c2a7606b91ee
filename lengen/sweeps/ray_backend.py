"""The Ray backend: each run is a Ray task with its CPU and (fractional) GPU resources declared,
on the cluster at --ray-address / RAY_ADDRESS or a local Ray instance. The sweep folder must be
on a filesystem every node sees. A task whose worker dies is retried by Ray and resumes from its
checkpoint. Ray is an optional extra (`pip install "lengen[sweep]"`), imported only here."""

from __future__ import annotations

import os

from lengen._threads import fix_threads
from lengen.errors import LengenError
from lengen.sweeps.worker import run_job

MAX_RETRIES = 3  # Ray re-runs a task whose worker process died this many times


def _import_ray():
    try:
        import ray
    except ImportError:
        raise LengenError("--backend ray needs Ray: pip install \"lengen[sweep]\"") from None
    return ray


def _execute(sweep_path: str, job: dict, device: str, threads: int) -> list[dict]:
    fix_threads(threads)
    if device.startswith("cuda"):
        device = "cuda"  # Ray sets CUDA_VISIBLE_DEVICES to the GPU it assigned: that is cuda:0
    return run_job(sweep_path, job, device)


def connect(address: str | None, num_cpus: int | None = None):
    """ray.init: the given cluster, else RAY_ADDRESS, else a new local instance."""
    ray = _import_ray()
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS")
        kwargs = {} if address else {"num_cpus": num_cpus or os.cpu_count()}
        ray.init(address=address, include_dashboard=False, log_to_driver=False, **kwargs)
    return ray


def run_ray(jobs, sweep_path: str, address: str | None, device: str, threads: int, runs_per_gpu: int,
            on_result, on_tick, tick_seconds: float = 2.0) -> None:
    ray = connect(address)
    gpus = ray.cluster_resources().get("GPU", 0)
    if device.startswith("cuda") and not gpus:
        raise LengenError(f"--device {device}: the Ray cluster has no GPUs")
    use_gpu = gpus > 0 and device != "cpu"
    task = ray.remote(_execute).options(num_cpus=threads, num_gpus=1.0 / runs_per_gpu if use_gpu else 0,
                                        max_retries=MAX_RETRIES, retry_exceptions=False)
    run_device = "cuda" if use_gpu else "cpu"
    refs = {task.remote(sweep_path, job, run_device, threads): job for job in jobs}
    while refs:
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=tick_seconds, fetch_local=True)
        for ref in done:
            job = refs.pop(ref)
            try:
                results = ray.get(ref)
            except ray.exceptions.RayError as e:  # the worker died MAX_RETRIES + 1 times
                error = " ".join(f"{type(e).__name__}: {e}".split())[:500]
                results = [{"run_id": r["run_id"], "status": "failed", "seconds": 0.0, "error": error}
                           for r in job["runs"]]
            for result in results:
                on_result(result)
        on_tick()
