"""Sweeps: a YAML grid of `lengen train` options run as one resumable study, on a local process
pool or a Ray cluster, each run in its own run directory, results rebuilt as CSV tables.

    from lengen.sweeps import load_spec, expand, run_sweep, SweepOptions
    run_sweep(load_spec("ruoss2023-mini"), "sweeps/mini", SweepOptions(device="cpu"))

See docs/sweeps.md."""

from lengen.sweeps.runner import SweepOptions, run_sweep
from lengen.sweeps.spec import SweepRun, SweepSpec, SweepSpecError, expand, load_spec, parse_spec, run_id
from lengen.sweeps.status import sweep_status

__all__ = ["SweepOptions", "SweepRun", "SweepSpec", "SweepSpecError", "expand", "load_spec", "parse_spec",
           "run_id", "run_sweep", "sweep_status"]
