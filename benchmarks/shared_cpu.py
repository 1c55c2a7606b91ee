"""Training speed on an idle and on a shared CPU: `lengen train` (the seed paper's model, bucket_sort,
batch 128, U{1..20}). Two cases, each from one invocation:

competitor (the default): lengen's default (OpenMP waits passively when other processes are busy
at start, lengen/_openmp.py), OpenMP always spinning first (GOMP_SPINCOUNT=300000: torch's own
default), always passive (OMP_WAIT_POLICY=PASSIVE), and --threads 1; each alone and beside a
competing CPU-bound process started by this script. The time is the run's own training clock
(eval.json's train_seconds).

    python benchmarks/shared_cpu.py                 # 40 steps per row
    python benchmarks/shared_cpu.py --steps 100

later (issue 49, load that arrives after start): one `lengen train` started on an idle machine,
two more started DELAY seconds (5) after it, all with default threads; first with lengen's default
(the thread count follows the load, lengen/_threads.py), then with the count fixed at torch's
default through OMP_NUM_THREADS (lengen before the change: the issue measured 0.50 for the first
run). Each setting also runs alone (the idle rows: compare the two for the idle cost). Times are
wall clock, from the process's start to its exit (import, training, evaluation).

    python benchmarks/shared_cpu.py later           # 300 steps per run (as in the issue)
    python benchmarks/shared_cpu.py later --quick   # 60 steps, the others 2 s later: a check that it works

The idle rows come first (--idle-runs, 2 per setting, interleaved); about 5 minutes on an idle 2-core
machine at 300 steps. Fair share: every run needs A seconds of the whole machine, A = the same
setting's best idle time.
While k runs are unfinished the machine is split equally: each advances at 1/k of its idle speed.
Run i's fair-share time F_i is the finish time that this gives, minus its start s_i; its ratio is
F_i / (measured time). For one run at 0 and two at d (all three unfinished until the first ends):
F_first = d + 3 (A - d); by then each later run has done A - d and shares the machine with the
other for its last d: F_later = 3 (A - d) + 2 d (`fair_share_times` computes any starts). The
issue's figures: A = 23.4, d = 5: F_first = 60.2 s, measured 119.8 s, ratio 0.50; F_later = 65.2 s.
Target: >= 0.8 for every run, and the idle time within 5% of the fixed count's.
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

from lengen.formatting import format_table

CLI = [sys.executable, "-c", "import sys; from lengen.cli import main; sys.exit(main())"]
HOG = [sys.executable, "-c", "while True: pass"]
TORCH_THREADS = [sys.executable, "-c", "import torch; print(torch.get_num_threads())"]
OPENMP_VARIABLES = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GOMP_SPINCOUNT")


def train_command(steps: int, out: Path, extra: list[str]) -> list[str]:
    return CLI + ["train", "--task", "bucket_sort", "--steps", str(steps), "--train-length", "20", "--max-length",
                  "20", "--eval-samples", "1", "--checkpoint-every", str(steps), "--device", "cpu", "--no-progress",
                  "--out", str(out), *extra]


def train_seconds(steps: int, env: dict, extra: list[str]) -> float:
    out = Path(tempfile.mkdtemp(prefix="lengen-shared-cpu-")) / "run"
    subprocess.run(train_command(steps, out, extra), env=env, check=True, capture_output=True)
    return json.loads((out / "eval.json").read_text())["train_seconds"]


def fair_share_times(starts: list[float], work: float) -> list[float]:
    """Each run needs `work` seconds of the whole machine; while k runs are unfinished each
    advances at 1/k. Returns each run's finish minus its start."""
    left, finish, t = [work] * len(starts), [None] * len(starts), 0.0
    while None in finish:
        active = [i for i, s in enumerate(starts) if s <= t and finish[i] is None]
        later = [s for s in starts if s > t]
        if not active:
            t = min(later)
            continue
        k = len(active)
        dt = min(min(left[i] for i in active) * k, (min(later) - t) if later else float("inf"))
        t += dt
        for i in active:
            left[i] -= dt / k
            if left[i] <= 1e-9 * work:
                finish[i] = t
    return [f - s for f, s in zip(finish, starts)]


def timed_runs(steps: int, env: dict, starts: list[float], folder: Path) -> list[dict]:
    """Start one `lengen train` per entry of `starts` (seconds after the first); wait for all.
    Per run: its start, wall seconds to exit, CPU seconds (all its threads) and train_seconds."""
    procs, t0 = [], time.monotonic()
    for i, start in enumerate(starts):
        time.sleep(max(0.0, start - (time.monotonic() - t0)))
        log = open(folder / f"run{i}.log", "w")
        p = subprocess.Popen(train_command(steps, folder / f"run{i}", []), env=env, stdout=log, stderr=log)
        procs.append({"pid": p.pid, "start": time.monotonic() - t0, "log": log, "out": folder / f"run{i}"})
    running = list(procs)
    try:
        while running:
            for r in list(running):
                pid, status, usage = os.wait4(r["pid"], os.WNOHANG)   # the rusage: the run's CPU time
                if pid == 0:
                    continue
                r["wall"] = time.monotonic() - t0 - r["start"]
                r["cpu"] = usage.ru_utime + usage.ru_stime
                r["log"].close()
                running.remove(r)
                if os.waitstatus_to_exitcode(status) != 0:
                    raise SystemExit(f"lengen train failed:\n{(folder / (r['out'].name + '.log')).read_text()}")
                r["train"] = json.loads((r["out"] / "eval.json").read_text())["train_seconds"]
            time.sleep(0.02)
    finally:
        for r in running:   # only after a failure
            os.kill(r["pid"], 9)
            os.waitpid(r["pid"], 0)
    return procs


def later_case(steps: int, delay: float, idle_runs: int, base: dict) -> None:
    threads = subprocess.run(TORCH_THREADS, env=base, capture_output=True, text=True, check=True).stdout.strip()
    settings = [("lengen default", base), (f"fixed {threads} threads", {**base, "OMP_NUM_THREADS": threads})]
    folder = Path(tempfile.mkdtemp(prefix="lengen-shared-cpu-later-"))
    rows, ratios, idle = [], {}, {label: [] for label, _ in settings}
    for k in range(idle_runs):   # the idle rows first, the settings interleaved
        for j, (label, env) in enumerate(settings):
            (folder / f"alone-{j}-{k}").mkdir()
            (alone,) = timed_runs(steps, env, [0.0], folder / f"alone-{j}-{k}")
            idle[label].append(alone["wall"])
            rows.append([label, "alone (idle)", "0.0", f"{alone['wall']:.1f}", f"{alone['cpu']:.1f}",
                         f"{alone['train']:.1f}", "", ""])
            print(f"  {label}: alone {alone['wall']:.1f} s", flush=True)
    idle = {label: min(times) for label, times in idle.items()}   # A: the best idle time
    for j, (label, env) in enumerate(settings):
        (folder / f"shared-{j}").mkdir()
        runs = timed_runs(steps, env, [0.0, delay, delay], folder / f"shared-{j}")
        fair = fair_share_times([r["start"] for r in runs], idle[label])
        for i, (r, f) in enumerate(zip(runs, fair)):
            ratios[(label, i)] = f / r["wall"]
            rows.append([label, "first (idle start)" if i == 0 else f"later #{i}", f"{r['start']:.1f}",
                         f"{r['wall']:.1f}", f"{r['cpu']:.1f}", f"{r['train']:.1f}", f"{f:.1f}", f"{f / r['wall']:.2f}"])
            print(f"  {label}: run {i} started {r['start']:.1f} s, {r['wall']:.1f} s, fair share {f:.1f} s, "
                  f"ratio {f / r['wall']:.2f}", flush=True)
    default, fixed = (label for label, _ in settings)
    print(f"\n{os.cpu_count()} cores, {steps} training steps per run; shared: runs at 0 s and {delay:g} s "
          f"(twice); seconds are wall clock from start to exit; fair share from the best idle time")   # the caption, right above
    print(format_table(["setting", "run", "started (s)", "wall (s)", "cpu (s)", "train (s)", "fair share (s)",
                        "ratio"], rows))
    worst = min(v for (label, _), v in ratios.items() if label == default)
    print(f"\nlengen default: lowest ratio {worst:.2f} (target >= 0.8); best idle {idle[default]:.1f} s against "
          f"{idle[fixed]:.1f} s with the count fixed ({idle[default] / idle[fixed] - 1:+.1%}; target within 5%)")


def competitor_case(steps: int, base: dict) -> None:
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
                s = train_seconds(steps, env, extra)
                rows.append([machine, label, f"{s:.2f}", f"{steps / s:.2f}"])
                print(f"  {machine:22s} {label:24s} {s:7.2f} s", flush=True)
        finally:
            if hog:
                hog.kill()
                hog.wait()
    print(f"\n{os.cpu_count()} cores, {steps} training steps per row")   # the caption, right above
    print(format_table(["machine", "setting", "train seconds", "steps/s"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", nargs="?", choices=("competitor", "later"), default="competitor")
    ap.add_argument("--steps", type=int, help="training steps per run (default 40; later: 300, --quick 60)")
    ap.add_argument("--delay", type=float, help="later: seconds between the first run and the two others "
                                                "(default 5; --quick 2)")
    ap.add_argument("--idle-runs", type=int, help="later: idle runs per setting, the best counts (default 2; "
                                                   "--quick 1)")
    ap.add_argument("--quick", action="store_true", help="later: 60 steps, 2 s delay, one idle run per setting")
    args = ap.parse_args()
    # the child processes choose as lengen would for a user who set nothing
    base = {k: v for k, v in os.environ.items() if k not in OPENMP_VARIABLES}
    if args.case == "later":
        later_case(args.steps or (60 if args.quick else 300), args.delay if args.delay is not None
                   else 2.0 if args.quick else 5.0, args.idle_runs or (1 if args.quick else 2), base)
    else:
        competitor_case(args.steps or 40, base)


if __name__ == "__main__":
    main()
