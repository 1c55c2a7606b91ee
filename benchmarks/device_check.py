"""Every registered encoding trains on a device: lengen's own training loop (`lengen train`'s),
the seed paper's CHE model (5 x 8 x 64, batch 128, U{1..N}), standard and randomized positions,
then a checkpoint written on that device evaluated on the CPU. Also fp32 / tf32 / bf16 for a few
encodings. Prints markdown tables (steps/s, first and last loss, accuracy) for docs/devices.md.

    python benchmarks/device_check.py --device cuda            # on a GPU machine
    python benchmarks/device_check.py --device cpu --steps 20  # the same checks on the CPU
    python benchmarks/device_check.py --part precision         # one table per output file (docs'
                                                               # bench blocks render a file's first)
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from lengen.cli.options import format_table
from lengen.devices import resolve_device
from lengen.encodings import ENCODINGS
from lengen.che.loop import evaluate_run, train
from lengen.che.options import config_from_options
from lengen.training.run_dir import RunDir


def one_run(root: Path, name: str, device: str, steps: int, max_length: int, **options) -> dict:
    cfg = config_from_options({"task": "reverse_string", "steps": steps, "train_length": 40,
                               "max_length": max_length, "eval_samples": 64, "lr": 3e-4,
                               "checkpoint_every": steps, "log_every": max(1, steps // 4), "device": device,
                               **options})
    out = root / name
    record = train(cfg, out, progress=False)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {"record": record, "first_loss": rows[0]["loss"], "last_loss": rows[-1]["loss"],
            "steps_per_s": steps / record["train_seconds"], "out": out, "cfg": cfg}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--max-length", type=int, default=60)
    ap.add_argument("--part", choices=("both", "encodings", "precision"), default="both",
                    help="every encoding x positions, fp32/tf32/bf16 for three encodings, or both")
    args = ap.parse_args()
    device = resolve_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    caption = f"device {device} ({name}), torch {torch.__version__}, {args.steps} steps per run"
    root = Path(tempfile.mkdtemp(prefix="lengen-device-check-"))
    if args.part in ("both", "encodings"):
        encodings_table(args, device, root, caption)
    if args.part in ("both", "precision"):
        precision_table(args, device, root, caption)


def encodings_table(args, device, root: Path, caption: str) -> None:
    rows = []
    for pe in ENCODINGS.names():
        for positions in ("standard", "randomized"):
            r = one_run(root, f"{pe}-{positions}", str(device), args.steps, args.max_length, pe=pe,
                        positions=positions)
            rec = r["record"]
            # the checkpoint written on `device`, evaluated on the CPU: numbers within noise
            cfg = r["cfg"]
            cfg.device = "cpu"
            cpu = evaluate_run(RunDir(r["out"]), cfg=cfg, progress=False, suffix="_cpu")
            rows.append([pe, positions, f"{r['steps_per_s']:.1f}", f"{r['first_loss']:.3f}", f"{r['last_loss']:.3f}",
                         rec["accuracy_in_train_range"], cpu["accuracy_in_train_range"], rec["score"], cpu["score"]])
            print(f"  {pe:13s} {positions:10s} {r['steps_per_s']:7.1f} steps/s  loss {r['first_loss']:.3f} -> "
                  f"{r['last_loss']:.3f}", flush=True)
    print(f"\n{caption}, every encoding")   # the caption right above its table
    print(format_table(["encoding", "positions", "steps/s", "first loss", "last loss", "acc 1-40",
                        "acc 1-40 (ckpt on cpu)", "score 41+", "score 41+ (ckpt on cpu)"], rows))


def precision_table(args, device, root: Path, caption: str) -> None:
    rows = []
    for pe in ("rope", "alibi", "relative"):
        for precision in ("fp32", "tf32", "bf16"):
            r = one_run(root, f"{pe}-{precision}", str(device), args.steps, args.max_length, pe=pe,
                        precision=precision)
            rows.append([pe, precision, f"{r['steps_per_s']:.1f}", f"{r['first_loss']:.3f}", f"{r['last_loss']:.3f}",
                         r["record"]["accuracy_in_train_range"]])
    print(f"\n{caption}, by precision")
    print(format_table(["encoding", "precision", "steps/s", "first loss", "last loss", "acc 1-40"], rows))


if __name__ == "__main__":
    main()
