"""The bookkeeping every resumable training loop shares (the CHE loop and the LM loop): claim
the run directory, refuse a checkpoint ahead of the requested steps, restore the model and the
optimizer, keep the metrics rows inside each checkpoint (metrics.jsonl is a copy written after
it and repaired on resume, so a kill between the two writes loses no row), count training
seconds across sessions, and stop on a non-finite loss with the last good checkpoint kept."""

from __future__ import annotations

import math
import time

from lengen.errors import LengenError
from lengen.training.run_dir import RunDir


class TrainingDiverged(LengenError):
    """The training loss became NaN or infinite; the last good checkpoint, if any, is kept."""


class TrainingSession:
    def __init__(self, run: RunDir, config: dict, identity: list[str], steps: int, normalize=None):
        """Check `config` against the directory (nothing written if it cannot be used), then claim
        it. `normalize(saved)` brings a config saved by an older lengen to the current schema."""
        self.run, self.config, self.steps = run, config, steps
        resuming = run.check(config, identity, normalize)
        # a checkpoint copied in from another run is refused, not trained on
        self.ckpt = run.load_checkpoint(config, identity, normalize) if resuming else None
        if self.ckpt is not None and self.ckpt["step"] > steps:
            done = self.ckpt["step"]
            raise LengenError(f"{run.path} is already trained to step {done}; --steps {steps} would "
                              f"evaluate the {done}-step model. Give --steps {done} or more, or another --out")
        run.claim(config, identity_keys=identity, normalize=normalize)
        self.step, self.metrics, self._seconds = 0, [], 0.0
        #: the step of the checkpoint on disk (None: none yet), for what a divergence leaves behind
        self.saved_step = None if self.ckpt is None else self.ckpt["step"]
        self._start = time.perf_counter()

    def restore(self, model, optimizer) -> dict | None:
        """Load the checkpoint's model and optimizer (and the metrics rows); returns the
        checkpoint, for the loop's own state (random streams, running sums), or None."""
        ckpt = self.ckpt
        if ckpt is not None:
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])  # moves its state to the parameters' device
            self.step, self._seconds = ckpt["step"], ckpt.get("seconds", 0.0)
            # older checkpoints hold no rows: then the file's, up to the checkpoint
            self.metrics = (ckpt["metrics"] if "metrics" in ckpt
                            else [m for m in self.run.read_metrics() if m["step"] <= self.step])
            self.run.write_metrics(self.metrics)  # repairs a file a kill left behind its checkpoint
        self._start = time.perf_counter()
        return ckpt

    @property
    def resumed_at(self) -> int:
        return self.ckpt["step"] if self.ckpt is not None else 0

    def elapsed(self) -> float:
        """Training seconds over every session of this run."""
        return round(self._seconds + time.perf_counter() - self._start, 3)

    def add_row(self, row: dict) -> dict:
        """Append a metrics row (with the cumulative seconds); a non-finite loss stops training."""
        if not math.isfinite(row["loss"]):
            kept = ("no checkpoint was written before it" if self.saved_step is None
                    else f"the checkpoint of step {self.saved_step} is kept")
            raise TrainingDiverged(f"training diverged at step {row['step']} (loss {row['loss']}); {kept}; "
                                   "lower --lr or --grad-clip")
        row["seconds"] = self.elapsed()
        self.metrics.append(row)
        return row

    def save(self, model, optimizer, **state) -> None:
        """A checkpoint at self.step: model, optimizer, metrics rows, seconds, config, and `state`."""
        self.run.save_checkpoint({"step": self.step, "model": model.state_dict(),
                                  "optimizer": optimizer.state_dict(), "seconds": self.elapsed(),
                                  "metrics": list(self.metrics), "config": self.config, **state}, self.metrics)
        self.saved_step = self.step
