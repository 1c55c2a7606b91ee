"""Progress bars for long work: tqdm on a terminal; on anything else (a log file, CI, a sweep's
worker) one plain line now and then instead of carriage-return redraws, so a log stays readable
and small."""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm

LINE_EVERY_S = 30.0  # a non-terminal gets a line at the start, at most this often, and at the end


class _Lines(tqdm):
    """tqdm that writes whole lines, throttled to one per LINE_EVERY_S seconds."""

    def __init__(self, *args, **kwargs):
        self._last_line = float("-inf")
        super().__init__(*args, **kwargs)

    def display(self, msg=None, pos=None):
        self.fp.write((msg or self.__str__()).strip() + "\n")
        self.fp.flush()
        self._last_line = time.monotonic()
        return True

    def refresh(self, nolock=False, lock_args=None):
        if time.monotonic() - self._last_line >= LINE_EVERY_S:
            self.display()

    def close(self):
        if not self.disable and not getattr(self, "_closed_line", False):
            self._closed_line = True
            self.display()
        self.disable = True
        super().close()


def progress_bar(total: int, desc: str = "", disable: bool = False, initial: int = 0, unit: str = "it",
                 stream=None):
    """A tqdm bar (terminal) or a line-per-30-s progress report (anything else)."""
    stream = stream or sys.stderr
    if disable:
        return tqdm(total=total, disable=True)
    if stream.isatty():
        return tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, file=stream)
    return _Lines(total=total, initial=initial, desc=desc, unit=unit, file=stream, ncols=100,
                  mininterval=LINE_EVERY_S, ascii=True)
