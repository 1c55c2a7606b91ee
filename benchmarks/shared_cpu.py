"""Training speed on an idle and on a shared CPU: `lengen train` (the seed paper's model, bucket_sort,
batch 128, U{1..20}) with lengen's default (OpenMP waits passively when other processes are busy
at start, lengen/_openmp.py), with OpenMP always spinning first (GOMP_SPINCOUNT=300000: torch's
own default), always passive (OMP_WAIT_POLICY=PASSIVE), and with --threads 1; each alone and
beside a competing CPU-bound process started by this script. All rows come from one invocation.
The time is the run's own training clock (eval.json's train_seconds).

    python benchmarks/shared_cpu.py                 # 40 steps per row
    python benchmarks/shared_cpu.py --steps 100
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-c", "import sys; from lengen.cli import main; sys.exit(main())"]
HOG = [sys.executable, "-c", "while True: pass"]


def train_seconds(steps: int, env: dict, extra: list[str]) -> float:
    out = Path(tempfile.mkdtemp(prefix="lengen-shared-cpu-")) / "run"
    cmd = CLI + ["train", "--task", "bucket_sort", "--steps", str(steps), "--train-length", "20", "--max-length",
                 "20", "--eval-samples", "1", "--checkpoint-every", str(steps), "--device", "cpu", "--no-progress",
                 "--out", str(out), *extra]
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return json.loads((out / "eval.json").read_text())["train_seconds"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    from lengen.cli.options import format_table

    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS",
                                                              "GOMP_SPINCOUNT")}
    settings = [("lengen default", base, []),
                ("always spin (torch default)", {**base, "GOMP_SPINCOUNT": "300000"}, []),
                ("always passive", {**base, "OMP_WAIT_POLICY": "PASSIVE"}, []),
                ("--threads 1", base, ["--threads", "1"])]
    rows = []
    for machine in ("idle", "one competing process"):
        hog = subprocess.Popen(HOG) if machine != "idle" else None
        try:
            time.sleep(1.0 if hog else 0)
            for label, env, extra in settings:
                s = train_seconds(args.steps, env, extra)
                rows.append([machine, label, f"{s:.2f}", f"{args.steps / s:.2f}"])
                print(f"  {machine:22s} {label:24s} {s:7.2f} s", flush=True)
        finally:
            if hog:
                hog.kill()
                hog.wait()
    print(f"\n{os.cpu_count()} cores, {args.steps} training steps per row")   # the caption, right above
    print(format_table(["machine", "setting", "train seconds", "steps/s"], rows))


if __name__ == "__main__":
    main()
