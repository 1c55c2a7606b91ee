"""The local backend: a pool of worker processes on this machine, no server. On the CPU each
worker gets `threads` torch threads; on GPUs, K workers share each visible GPU (one small model
leaves most of a GPU idle)."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from lengen._threads import fix_threads
from lengen.sweeps.worker import run_job

_device: str | None = None
_PR_SET_PDEATHSIG = 1   # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """End this worker when the sweep's main process dies, however it dies (an out-of-memory
    killer sends SIGKILL, which runs no cleanup): otherwise workers train on with no parent,
    holding their runs' locks. Linux: the kernel's parent-death signal; elsewhere a thread that
    watches the parent id."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != parent:   # the parent died before the signal was armed
                os._exit(1)
            return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="lengen-parent-watch", daemon=True).start()


def _init_worker(threads: int, devices: list[str], counter, parent: int) -> None:
    """Runs once in each worker: dies with `parent`, its thread count and its device
    (round-robin over `devices`)."""
    global _device
    die_with_parent(parent)
    fix_threads(threads)
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    _device = devices[index % len(devices)]


def _execute(sweep_path: str, job: dict) -> list[dict]:
    return run_job(sweep_path, job, _device)


def run_in_process(jobs, sweep_path: str, threads: int, device: str, on_result, on_tick) -> None:
    """One worker: the runs one after another in this process (no pool to start; a debugger and
    monkeypatching reach the training code)."""
    fix_threads(threads)
    for job in jobs:
        for result in run_job(sweep_path, job, device):
            on_result(result)
        on_tick()


def run_local(jobs, sweep_path: str, workers: int, threads: int, devices: list[str], on_result, on_tick,
              tick_seconds: float = 2.0, max_pool_restarts: int = 3) -> None:
    """Run `jobs` (job dicts from lengen.sweeps.worker.job: one run or a group each) on a process
    pool; `on_result(result)` per finished run, `on_tick()` every `tick_seconds`. A worker that dies (out of memory, a signal) breaks the
    pool: it is rebuilt and the unfinished jobs resubmitted (they resume from their checkpoints).
    One worker runs in this process."""
    if workers == 1:
        return run_in_process(jobs, sweep_path, threads, devices[0], on_result, on_tick)
    ctx = mp.get_context("spawn")  # no fork after torch has started threads
    todo = list(jobs)
    restarts = 0
    while todo:
        counter = ctx.Value("i", 0)
        pool = ProcessPoolExecutor(max_workers=max(1, min(workers, len(todo))), mp_context=ctx,
                                   initializer=_init_worker, initargs=(threads, devices, counter, os.getpid()))
        futures = {pool.submit(_execute, sweep_path, job): job for job in todo}
        broken = False
        try:
            while futures:
                done, _ = wait(futures, timeout=tick_seconds, return_when=FIRST_COMPLETED)
                for f in done:
                    job = futures.pop(f)
                    try:
                        results = f.result()
                    except BrokenProcessPool:
                        broken = True
                        futures[f] = job  # keep it for the resubmission below
                        break
                    for result in results:
                        on_result(result)
                if broken:
                    break
                on_tick()
        finally:
            pool.shutdown(wait=not broken, cancel_futures=True)
        todo = list(futures.values()) if broken else []
        if broken:
            restarts += 1
            if restarts > max_pool_restarts:
                raise RuntimeError(f"sweep workers died {restarts} times; see the run logs")
