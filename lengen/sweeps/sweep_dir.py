"""A sweep directory: the sweep file and its run list, one run directory per run under runs/, and
the results tables rebuilt from those run directories (the single source of truth).

    DIR/runner.lock             held (flock) by the one `lengen sweep run` working on the folder;
                                it names that process (pid, host, start time)
    DIR/sweep.yaml              the sweep file as given
    DIR/sweep.json              name, options and the runs (id and grid point), in grid order
    DIR/history/<time>/         an earlier sweep.yaml and sweep.json, kept when the file changed
    DIR/runs/<id>/              a `lengen train` (`lengen lm train`) run directory
    DIR/state/<id>.lock         held (flock) by the process running the run; released when it dies
    DIR/state/<id>.progress.json  the run's latest metrics row while it trains
    DIR/state/<id>.failure.json   its last failure (one-line error, type); removed on success
    DIR/logs/<id>.log           one line per attempt, and the traceback of each failure
    DIR/results.csv             one row per finished run
    DIR/accuracy_by_length.csv  run_id, length, accuracy

A run is done when its done file exists (written last: eval.json for CHE runs, the evaluation's
sweep-eval-<hash>.json for language models, lengen.sweeps.kinds) and, read back, is whole and this
run's (its kind's `done_problem`), running while its lock is held, failed when its failure file
exists, damaged when its done file is there but cannot be counted (the next `sweep run` names it and
evaluates the run again), pending otherwise (possibly with a checkpoint to resume from).
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import shutil
import socket
import time
from pathlib import Path

from lengen import io
from lengen.errors import LengenError

STATES = ("done", "damaged", "running", "failed", "pending")


class SweepDir:
    SPEC = "sweep.yaml"
    INDEX = "sweep.json"
    RUNNER = "runner.lock"

    def __init__(self, path: str | Path, done_file: str = "eval.json", kind=None, evaluation: dict | None = None,
                 configs: dict | None = None):
        """`kind` (lengen.sweeps.kinds) and the sweep's `evaluation`: done files are read back
        and checked (`damage`) against `configs` (run id -> the sweep's config of the run; else a
        run's own config.json); without a kind, a done file counts by being there."""
        self.path = Path(path)
        self.done_file = done_file
        self.kind, self.evaluation, self.configs = kind, evaluation, configs or {}
        self._damage: dict[str, tuple] = {}

    def run_path(self, run_id: str) -> Path:
        return self.path / "runs" / run_id

    def state_file(self, run_id: str, kind: str) -> Path:
        """kind: lock, progress.json or failure.json."""
        return self.path / "state" / f"{run_id}.{kind}"

    def log_file(self, run_id: str) -> Path:
        return self.path / "logs" / f"{run_id}.log"

    @property
    def exists(self) -> bool:
        return (self.path / self.INDEX).exists()

    def check_writable(self, claimed: bool = False) -> None:
        """Refuse a folder that holds something other than a sweep, before any work; `claimed`:
        this process holds the runner lock (else a held lock is another runner, named)."""
        if self.path.exists() and not self.path.is_dir():
            raise LengenError(f"{self.path} exists and is not a directory")
        if not self.path.is_dir() or self.exists:
            return
        holder = None if claimed else self.runner()
        if holder:   # another runner is creating this sweep: name it, not "not a sweep"
            raise self.busy(holder)
        if any(not self._ours(p.name) for p in self.path.iterdir()):
            raise LengenError(f"{self.path} is not empty and holds no lengen sweep; use another --out")

    def _ours(self, name: str) -> bool:
        """What a runner writes into a new folder before its run list (sweep.json) is there: its
        lock, the sweep file, their atomic-write temporaries, and another command's write probe."""
        return (name in (self.RUNNER, self.SPEC) or name.startswith(".lengen-write-test-")
                or any(name.startswith(f".{n}.") and name.endswith(".tmp") for n in (self.SPEC, self.INDEX)))

    def claim_runner(self) -> "RunLock":
        """The folder's runner lock, held until released (or the process dies): one `lengen sweep
        run` per folder. Taken before anything else is written; LengenError naming the holder when
        another process has it."""
        self.path.mkdir(parents=True, exist_ok=True)
        lock = RunLock(self.path / self.RUNNER)
        if not lock.acquire():
            raise self.busy(self.runner() or "starting")
        since = datetime.datetime.now().isoformat(timespec="seconds")
        lock.describe(f"pid {os.getpid()} on {socket.gethostname()} since {since}")
        return lock

    def busy(self, holder: str) -> LengenError:
        """The refusal of a second runner on this folder, naming the one that holds it."""
        return LengenError(f"{self.path} is being run by another `lengen sweep run` ({holder}); wait "
                           "for it to finish or stop it, then rerun to resume")

    def runner(self) -> str | None:
        """Who runs the sweep now ("pid N on HOST since T"), or None when no process does."""
        lock_file = self.path / self.RUNNER
        deadline = time.monotonic() + 2.0
        while is_locked(lock_file):
            try:
                text = lock_file.read_text().strip()
            except OSError:
                return None
            if text:
                return text
            if time.monotonic() > deadline:
                return "starting"
            time.sleep(0.02)   # the holder writes its name just after taking the lock
        return None

    def write_index(self, spec, runs) -> Path | None:
        """Write the sweep file and its run list. An index that differs from the one already
        there (an edited sweep file) is kept first under history/; returns where, or None. An
        unchanged index is not rewritten."""
        text = spec.source or json.dumps(spec.to_dict(), indent=2)
        index = {"name": spec.name, "description": spec.description, "spec": spec.to_dict(),
                 "runs": [{"run_id": r.run_id, "point": r.point} for r in runs]}
        kept = None
        if self.exists:
            old = self._text(self.INDEX) or ""   # kept as it is, even damaged
            try:
                same = json.loads(old) == json.loads(json.dumps(index))
            except ValueError:
                same = False
            if same and self._text(self.SPEC) == text:
                return None
            kept = self.path / "history" / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            io.write_text(kept / self.SPEC, self._text(self.SPEC) or "")
            io.write_text(kept / self.INDEX, old)
        io.write_text(self.path / self.SPEC, text)
        io.write_json(self.path / self.INDEX, index)
        return kept

    def _text(self, name: str) -> str | None:
        try:
            return (self.path / name).read_text()
        except OSError:
            return None

    def outside(self, run_ids=None) -> list[str]:
        """Run directories under runs/ that are not among `run_ids` (default: the index's runs, the
        grid in force): runs of an earlier version of the sweep file."""
        known = set(run_ids if run_ids is not None else (r["run_id"] for r in self.read_index()["runs"]))
        found = self.path / "runs"
        return sorted(p.name for p in found.iterdir() if p.is_dir() and p.name not in known) \
            if found.is_dir() else []

    def adopt(self, other: "SweepDir", run_ids) -> list[str]:
        """Copy into this folder the run directories of `other` (another sweep's folder) for the
        `run_ids` that this folder lacks and that are not running there: a run id is the hash of
        the run's whole configuration, so a run of the same id is this run, trained or partly
        trained. Each copy is written under a temporary name and renamed (a killed copy leaves no
        half run). Returns the ids copied; their evaluation follows this sweep's `eval:` section."""
        copied = []
        for rid in run_ids:
            src, dst = other.run_path(rid), self.run_path(rid)
            if dst.exists() or not src.is_dir() or other.state(rid) == "running":
                continue
            tmp = dst.with_name(f".{rid}.adopting")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp)
            os.replace(tmp, dst)
            copied.append(rid)
        return copied

    def remove_run(self, run_id: str) -> None:
        """Delete a run's directory and its state and log files."""
        shutil.rmtree(self.run_path(run_id))
        for kind in ("lock", "progress.json", "failure.json"):
            self.state_file(run_id, kind).unlink(missing_ok=True)
        self.log_file(run_id).unlink(missing_ok=True)

    def read_index(self) -> dict:
        if not self.exists:
            raise LengenError(f"{self.path} is not a lengen sweep directory (no {self.INDEX}); "
                              "create one with `lengen sweep run SPEC --out DIR`")
        try:
            return io.read_json(self.path / self.INDEX)
        except (OSError, ValueError) as e:
            raise LengenError(f"{self.path / self.INDEX} is damaged ({e}); rerun `lengen sweep run` "
                              "with the sweep file to rewrite it") from None

    def damage(self, run_id: str) -> str | None:
        """Why the run's done file, which is there, cannot be counted (one line naming the file:
        damaged, or another run's), or None: no done file, or one that can."""
        done = self.run_path(run_id) / self.done_file
        try:
            stamp = done.stat().st_mtime_ns
        except OSError:
            return None
        if self.kind is None:
            return None
        if self._damage.get(run_id, (None,))[0] != stamp:  # read back once per version of the file
            self._damage[run_id] = (stamp, self.kind.done_problem(self.run_path(run_id), self.done_file,
                                                                  self.evaluation, self.configs.get(run_id)))
        return self._damage[run_id][1]

    def is_done(self, run_id: str) -> bool:
        return (self.run_path(run_id) / self.done_file).exists() and self.damage(run_id) is None

    def state(self, run_id: str) -> str:
        if self.is_done(run_id):
            return "done"
        if is_locked(self.state_file(run_id, "lock")):
            return "running"
        if self.state_file(run_id, "failure.json").exists():
            return "failed"
        if (self.run_path(run_id) / self.done_file).exists():
            return "damaged"
        return "pending"

    def failure(self, run_id: str) -> dict | None:
        return _read(self.state_file(run_id, "failure.json"))

    def progress(self, run_id: str) -> dict | None:
        return _read(self.state_file(run_id, "progress.json"))


def _read(path: Path) -> dict | None:
    try:
        return io.read_json(path)
    except (OSError, ValueError):
        return None


def is_locked(lock_file: Path) -> bool:
    """Whether another process holds the run's lock (a dead process holds none)."""
    try:   # read-only: a flock needs no write access, and status must work on a read-only sweep
        fd = os.open(lock_file, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


class RunLock:
    """An exclusive, non-blocking flock on a run's lock file for the life of one attempt."""

    def __init__(self, lock_file: Path):
        self.file = Path(lock_file)
        self.fd: int | None = None

    def acquire(self) -> bool:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            os.close(self.fd)
            self.fd = None
            return False

    def describe(self, text: str) -> None:
        """Write who holds the lock into the lock file (read by the process that is refused)."""
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, (text + "\n").encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
