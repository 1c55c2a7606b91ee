"""Model-steps/s that a sweep chunk achieved: every run's checkpoint (or finished) step, summed,
over the chunk's wall-clock seconds. For comparing `lengen sweep run` settings on one machine
(--group-size, --runs-per-gpu, --precision) on a real preset, start-up and checkpoints included,
where benchmarks/train_many.py times one group's steps alone.

    SECONDS=0; lengen sweep run ruoss2023-slice --out /tmp/s --device cuda --group-size 9 --time-limit 3
    python benchmarks/sweep_rate.py /tmp/s --seconds $SECONDS --label "group 9, 8 per GPU"

A fresh sweep folder per setting: steps already in the folder before the chunk would count.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lengen.sweeps.grouping import checkpoint_step  # noqa: E402
from lengen.sweeps.sweep_dir import SweepDir  # noqa: E402


def trained_steps(sweep: SweepDir, run_id: str) -> int:
    """A finished run's configured steps, else its checkpoint's step (0 without one)."""
    if sweep.is_done(run_id):
        return int(json.loads((sweep.run_path(run_id) / "config.json").read_text())["steps"])
    return checkpoint_step(sweep.run_path(run_id)) or 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", help="the sweep folder of one chunk")
    p.add_argument("--seconds", type=float, required=True, help="the chunk's wall-clock seconds")
    p.add_argument("--label", default="", help="what the row measured (the settings)")
    args = p.parse_args(argv)
    sweep = SweepDir(args.sweep)
    if not sweep.exists or args.seconds <= 0:
        print(f"sweep_rate.py: no sweep folder at {args.sweep} or --seconds not positive", file=sys.stderr)
        return 2
    runs = sweep.path / "runs"  # absent when the limit came before any run started
    run_ids = sorted(path.name for path in runs.iterdir() if path.is_dir()) if runs.is_dir() else []
    steps = [trained_steps(sweep, r) for r in run_ids]
    started = sum(s > 0 for s in steps)
    print(f"| {args.label} | {len(run_ids)} | {started} | {sum(steps):,} | {args.seconds:.0f} | "
          f"{sum(steps) / args.seconds:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
