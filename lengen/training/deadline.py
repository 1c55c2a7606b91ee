"""A wall-clock deadline for training (`lengen sweep run --time-limit`): once it has passed, a
training loop saves a checkpoint at its next step and raises DeadlineReached, so a machine lent
for a fixed time is used to its end and a rerun resumes at that step. The deadline is a time
(time.time()), not a duration, so every worker of a sweep stops at the same moment."""

from __future__ import annotations

import contextlib
import time

from lengen import _threads
from lengen.errors import LengenError

_stop_at: float | None = None


class DeadlineReached(LengenError):
    """Training stopped at the deadline after saving a checkpoint; a rerun resumes it."""


@contextlib.contextmanager
def deadline(stop_at: float | None):
    """Training inside stops at `stop_at` (seconds since the epoch; None: never)."""
    global _stop_at
    before, _stop_at = _stop_at, stop_at
    try:
        yield
    finally:
        _stop_at = before


def passed() -> bool:
    return _stop_at is not None and time.time() >= _stop_at


def stop_here(step: int, steps: int) -> bool:
    """True when a loop that has just finished `step` of `steps` must checkpoint and stop."""
    return step < steps and passed()


def checkpoint_or_stop(step: int, steps: int, checkpoint_every: int, checkpoint, bar) -> None:
    """The end of a training step: `checkpoint()` on schedule, at the last step or at the
    deadline; at the deadline, close the progress bar and raise DeadlineReached. Every training
    loop ends its steps here, so the thread count follows the machine's load here too."""
    _threads.between_steps()
    stop = stop_here(step, steps)
    if step % checkpoint_every == 0 or step == steps or stop:
        checkpoint()
    if stop:
        bar.close()
        raise reached(step, steps)


def reached(step: int, steps: int) -> DeadlineReached:
    return DeadlineReached(f"stopped at step {step} of {steps}: the time limit passed; the checkpoint "
                           "there resumes it")
