"""OpenMP's wait policy, chosen when lengen is imported (before torch loads the OpenMP runtime).

OpenMP threads spin for a while before they sleep. On an idle machine that makes the CHE model's
many small parallel regions fast; on a machine where another process holds a core, a spinning
thread waits for one that is not running, and every region becomes a wait. Measured on 2 cores
(benchmarks/shared_cpu.py, docs/results/speed.md): spinning is ~1.4x faster idle and ~1.7x slower
beside one CPU-bound process (the issue that reported it saw 30x with 40 steps).

So: if, at import, other processes keep at least half a core busy, threads wait passively;
otherwise torch's default (spin, then sleep) stays. A user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is
never changed. Only Linux (/proc/stat) is sampled; elsewhere the default stays.

Load that arrives later is lengen._threads' job (the thread count is the one OpenMP setting that
can still change once the runtime is loaded); the user's choices it must not override are kept
here, where nothing imports torch: the environment as it was before lengen changed it, and
`--threads` (pin_threads).
"""

from __future__ import annotations

import os
import time

BUSY_CORES = 0.5        # others' load, in cores, from which threads wait passively
SAMPLE_SECONDS = 0.05       # 5 clock ticks per core at 100 Hz

#: thread-count and wait-policy settings the user made, read when lengen is first imported (before
#: choose_wait_policy adds its own OMP_WAIT_POLICY, which is not the user's)
USER_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
USER_SETTINGS = {k: os.environ[k] for k in USER_VARIABLES if k in os.environ}
_pinned: int | None = None


def pin_threads(n: int) -> None:
    """The user chose `n` torch threads (--threads): lengen._threads never changes the count.
    The caller sets torch's count itself."""
    global _pinned
    _pinned = n


def user_choice() -> str | None:
    """What the user chose about threads ('--threads 2', 'OMP_NUM_THREADS=4'), None if nothing."""
    if _pinned is not None:
        return f"--threads {_pinned}"
    return ", ".join(f"{k}={v}" for k, v in USER_SETTINGS.items()) or None


def cpu_times(stat: str) -> tuple[int, int]:
    """(busy, total) jiffies from the first line of /proc/stat."""
    fields = [int(x) for x in stat.split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - idle, total


def busy_cores(read=None, sleep=time.sleep, cores: int | None = None) -> float | None:
    """Cores kept busy by other processes over a short sample (this process sleeps through it),
    or None where /proc/stat cannot be read."""
    def _read() -> str:
        with open("/proc/stat") as f:
            return f.read()

    read = read or _read
    try:
        b0, t0 = cpu_times(read())
        sleep(SAMPLE_SECONDS)
        b1, t1 = cpu_times(read())
    except (OSError, ValueError, IndexError):
        return None
    if t1 <= t0:
        return None
    cores = cores or os.cpu_count() or 1
    return cores * (b1 - b0) / (t1 - t0)


def choose_wait_policy(environ=os.environ, measure=busy_cores) -> str:
    """Set OMP_WAIT_POLICY=PASSIVE in `environ` when the machine is busy; return what was decided."""
    if "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ:
        return "user"
    load = measure()
    if load is not None and load >= BUSY_CORES:
        environ["OMP_WAIT_POLICY"] = "PASSIVE"
        return f"passive ({load:.1f} cores busy at start)"
    return "default"
