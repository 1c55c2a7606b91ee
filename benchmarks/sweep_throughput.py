"""How fast `lengen sweep run` gets through runs, against running them one at a time (measured in
the same invocation).

CPU (default): runs per hour for a slice of the `ruoss2023-mini` preset, with 1 worker (the runs
one after another in one process, 1 thread) and with the local pool (one worker per core).

GPU (--device cuda): training model-steps/s of one run alone against K processes sharing the GPU
(--runs-per-gpu K), each training G runs as one group (--group-size G: the runs differ in seed
only, as a sweep's groups do): the seed paper's model, rope, batch 128, U{1..40},
reverse_string; K x G runs x `--steps` steps over the wall time of the slowest run's training
(process start-up excluded: each run's own training clock, eval.json's train_seconds).

    python benchmarks/sweep_throughput.py --tasks 1            # CPU: a 6-run slice of the preset
    python benchmarks/sweep_throughput.py --device cuda --ks 1,2,4,8,16 --steps 300
    python benchmarks/sweep_throughput.py --device cuda --ks 8,16 --group-sizes 1,9,30   # what to set
                                                               # --group-size and --runs-per-gpu from
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from lengen.cli.options import format_table
from lengen.devices import resolve_device
from lengen.sweeps import SweepOptions, load_spec, parse_spec, run_sweep
from lengen.sweeps.runner import cpu_count


def cpu_bench(args) -> None:
    spec = load_spec("ruoss2023-mini")
    # a slice: seed 0 of the first --tasks tasks (6 runs each: 3 encodings x 2 samplers)
    spec.grid["seed"] = spec.grid["seed"][:1]
    spec.grid["task"] = spec.grid["task"][: args.tasks]
    rows = []
    for label, workers in (("1 worker (sequential)", 1), (f"local pool ({cpu_count()} workers)", cpu_count())):
        out = Path(tempfile.mkdtemp(prefix="lengen-sweep-bench-"))
        start = time.perf_counter()
        counts = run_sweep(spec, out, SweepOptions(device="cpu", workers=workers, threads=1, progress=False))
        wall = time.perf_counter() - start
        n = counts["done"]
        rows.append([label, n, f"{wall:.1f}", f"{3600 * n / wall:.1f}"])
        print(f"  {label}: {n} runs in {wall:.1f} s", flush=True)
    base = float(rows[0][3])
    for r in rows:
        r.append(f"{float(r[3]) / base:.2f}x")
    import torch
    # the caption, right above the table (docs' bench blocks take the line above a table)
    print(f"\nruoss2023-mini slice (seed 0, {args.tasks} task(s)), {cpu_count()} cores, 1 thread per run, "
          f"torch {torch.__version__}")
    print(format_table(["how", "runs", "wall s", "runs/hour", "vs 1 worker"], rows))


def gpu_bench(args) -> None:
    device = resolve_device(args.device)
    rows = []
    base = None
    for k, g in [(int(k), int(g)) for g in args.group_sizes.split(",") for k in args.ks.split(",")]:
        spec = parse_spec({"name": f"k{k}-g{g}", "grid": {"seed": list(range(k * g))},
                           "fixed": {"task": "reverse_string", "pe": "rope", "steps": args.steps, "train_length": 40,
                                     "max_length": 41, "eval_samples": 16, "batch_size": 128,
                                     "checkpoint_every": args.steps, "log_every": 50, "lr": 3e-4,
                                     "precision": args.precision}})
        out = Path(tempfile.mkdtemp(prefix="lengen-sweep-gpu-"))
        start = time.perf_counter()
        run_sweep(spec, out, SweepOptions(device=str(device), runs_per_gpu=k, workers=k, group_size=g,
                                          progress=False))
        wall = time.perf_counter() - start
        train_s = [json.loads(p.read_text())["train_seconds"] for p in out.glob("runs/*/eval.json")]
        rate = k * g * args.steps / max(train_s)
        base = base or rate / (k * g)
        rows.append([k, g, f"{args.steps / max(train_s):.1f}", f"{rate:.0f}", f"{rate / base:.2f}x", f"{wall:.1f}"])
        print(f"  K={k}, G={g}: {rate:.0f} model-steps/s", flush=True)
    print(format_table(["processes sharing the GPU", "group size", "steps/s per run", "model-steps/s",
                        "vs one run", "sweep wall s"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tasks", type=int, default=1, help="CPU: tasks of the ruoss2023-mini slice, 6 runs each "
                    "(default 1)")
    ap.add_argument("--ks", default="1,2,4,8,16", help="GPU: processes sharing the GPU (--runs-per-gpu)")
    ap.add_argument("--group-sizes", default="1", help="GPU: runs trained as one group in each process "
                    "(--group-size); every K is timed with every G")
    ap.add_argument("--steps", type=int, default=300, help="GPU: training steps per run")
    ap.add_argument("--precision", default="fp32", help="GPU: fp32, tf32 or bf16")
    args = ap.parse_args()
    if resolve_device(args.device).type == "cpu":
        cpu_bench(args)
    else:
        gpu_bench(args)


if __name__ == "__main__":
    main()
