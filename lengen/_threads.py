"""Torch's CPU thread count while a training runs: fewer threads while other processes hold
cores, torch's count again once they have left.

Why. OpenMP's wait policy is chosen once, at import (lengen/_openmp.py), and the runtime reads it
once. A training started on an idle machine keeps worker threads that spin; when other
multi-threaded jobs start later, every parallel region waits for a partner thread that is not
running (issue 49, 2 cores: 0.50 of its fair share beside two `lengen train` runs started 5 s
after it). The thread count is the one OpenMP setting that can still change: measured with
/proc/self/task/*/stat during CHE training steps (libgomp, torch 2.13), after
torch.set_num_threads(1) the spare worker used 1 jiffy in 4.6 s (it spins out its spin count
once, then sleeps), and set_num_threads(2) puts it back to work.

How. Between training steps (lengen.training.deadline.checkpoint_or_stop, the end of every
training loop's step), at most every INTERVAL_S seconds: others' load is the busy time of this
process's CPUs in /proc/stat minus this process's own CPU time, over the time since the last
reading (one read of /proc/stat: ~0.2 ms; the other calls cost ~0.5 us). With n threads on C cores, others load
our n cores with `others - (C - n)`; from LOWER_AT cores of that a thread is given back, and one
is taken again only when others would load the extra core by less than RAISE_BELOW (the gap is
the hysteresis). Never above the count torch had when the governor first saw it (or that someone
else set since), never below 1.

The user's choice is never overridden: `--threads` (lengen._openmp.pin_threads), OMP_NUM_THREADS,
MKL_NUM_THREADS, OMP_WAIT_POLICY or GOMP_SPINCOUNT set before lengen was imported. Results:
torch's fused LayerNorm backward sums in a thread-count-dependent order (docs/results/demo.md), so a
run whose count changed differs from an idle run in the last bits; `--threads N` keeps it fixed.
Only Linux (/proc/stat) is sampled; elsewhere the count stays.
"""

from __future__ import annotations

import os
import time
from typing import Callable

import torch

from lengen._openmp import cpu_times, pin_threads, user_choice

INTERVAL_S = 1.0    # how often load is re-sampled: a reaction within ~2 s, for ~0.2 ms a second
LOWER_AT = 0.5      # others' load on our cores (in cores) from which a thread is given back
RAISE_BELOW = 0.25  # ... and below which, on the core a thread more would use, one is taken again


def _read_proc_stat() -> str:
    with open("/proc/stat") as f:
        return f.read()


def _our_cpus() -> set[int] | None:
    """The CPUs this process may run on (None: all of them)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


class OthersLoad:
    """Cores kept busy by other processes on this process's CPUs since the previous call; None on
    the first call and where /proc/stat cannot be read."""

    def __init__(self, read: Callable[[], str] = _read_proc_stat, own_cpu: Callable[[], float] = time.process_time,
                 cpus: set[int] | None = None, tick: float = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100):
        self.read, self.own_cpu, self.tick = read, own_cpu, tick
        self.cpus = cpus if cpus is not None else _our_cpus()
        self._last: tuple[int, int, float] | None = None

    def _busy_total(self) -> tuple[int, int, int]:
        """(busy, total) jiffies summed over our CPUs' `cpuN` lines, and how many lines."""
        busy = total = count = 0
        for line in self.read().splitlines():
            name = line.split(" ", 1)[0]
            if name.startswith("cpu") and name[3:].isdigit() and (self.cpus is None or int(name[3:]) in self.cpus):
                b, t = cpu_times(line)
                busy, total, count = busy + b, total + t, count + 1
        if count == 0:
            raise ValueError("no CPU lines in /proc/stat")
        return busy, total, count

    def __call__(self) -> float | None:
        try:
            busy, total, cores = self._busy_total()
        except (OSError, ValueError, IndexError):
            return None
        own = self.own_cpu()
        last, self._last = self._last, (busy, total, own)
        if last is None or total <= last[1]:
            return None
        wall = (total - last[1]) / self.tick / cores    # seconds: each CPU's line advances by the wall time
        return max(0.0, ((busy - last[0]) / self.tick - (own - last[2])) / wall)


def decide(current: int, ceiling: int, others: float, cores: int) -> int:
    """The thread count for `others` cores' load from other processes, from `current` threads
    (more threads than cores, with no one else busy, is left alone: that count was chosen)."""
    n = current
    while n > 1 and others >= LOWER_AT and others - (cores - n) >= LOWER_AT:
        n -= 1
    while n < ceiling and others - (cores - (n + 1)) < RAISE_BELOW:
        n += 1
    return n


class ThreadGovernor:
    """Call `between_steps()` after every training step; it costs a clock read except every
    `interval` seconds, when it samples `others_load` and sets the thread count."""

    def __init__(self, get_threads: Callable[[], int] = torch.get_num_threads,
                 set_threads: Callable[[int], None] = torch.set_num_threads,
                 others_load: Callable[[], float | None] | None = None, clock: Callable[[], float] = time.monotonic,
                 cores: int | None = None, interval: float = INTERVAL_S,
                 user: Callable[[], str | None] = user_choice):
        self.get_threads, self.set_threads, self.clock, self.interval, self.user = (get_threads, set_threads, clock,
                                                                                    interval, user)
        self.others_load = others_load or OthersLoad()
        self.cores = cores or len(_our_cpus() or ()) or os.cpu_count() or 1
        self.ceiling: int | None = None   # torch's count when first seen, or as someone else set it since
        self._set: int | None = None      # the count as this governor last left it
        self._next = float("-inf")        # clock time of the next sample

    def restart(self) -> None:
        """Forget the last reading and the ceiling: the next call starts afresh."""
        self._next, self._set = float("-inf"), None

    def between_steps(self) -> None:
        now = self.clock()
        if now < self._next:
            return
        # a reading that spans a pause in training (an evaluation between two runs) only starts a new one
        stale = now - self._next > 2 * self.interval
        self._next = now + self.interval
        if self.user() is not None:
            return
        current = self.get_threads()
        if current != self._set:  # the first sample, or the count was set by someone else: theirs is the ceiling
            self.ceiling = current
        self._set = current
        others = self.others_load()
        if others is None or stale:
            return
        n = decide(current, self.ceiling, others, self.cores)
        if n != current:
            self.set_threads(n)
            self._set = n


#: the process's governor: one thread count, whichever training loop runs
governor = ThreadGovernor()
if hasattr(os, "register_at_fork"):  # a forked worker (sweeps) starts its own readings and ceiling
    os.register_at_fork(after_in_child=governor.restart)


def between_steps() -> None:
    """The end of a training step: adapt the thread count to the load (at most every INTERVAL_S)."""
    governor.between_steps()


def fix_threads(n: int) -> None:
    """A count chosen on purpose (`--threads`, a sweep's threads per worker): set it, and training
    never changes it under load."""
    torch.set_num_threads(n)
    pin_threads(n)
