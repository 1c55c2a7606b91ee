"""`lengen demo`: the point of the project in a few CPU minutes. One task, trained on short
lengths with RoPE at standard positions and at randomized positions, evaluated on lengths up to
3x the training length: a table of accuracy per length band and a plot of both curves."""

from __future__ import annotations

import argparse
from pathlib import Path

from lengen.cli.options import add_device_arguments, format_table, set_threads
from lengen.io import check_writable
from lengen.models.config import ModelConfig
from lengen.training.config import TrainConfig
from lengen.training.loop import train
from lengen.training.plots import plot_accuracy

EPILOG = """The runs are ordinary run directories (resumable: rerun to continue), so
`lengen eval demo_runs/rope-randomized --positions uniform` works on them afterwards."""


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="standard vs randomized RoPE on one task, in a few CPU minutes",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="bucket_sort", help="CHE task (default bucket_sort)")
    p.add_argument("--pe", default="rope", help="positional encoding (default rope)")
    p.add_argument("--steps", type=int, default=1000, help="training steps per run (default 1000)")
    p.add_argument("--train-length", type=int, default=20, help="train on lengths 1..N (default 20)")
    p.add_argument("--max-length", type=int, default=60, help="evaluate lengths 1..M (default 60)")
    p.add_argument("--eval-samples", type=int, default=128, help="samples per length (default 128)")
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate (default 1e-3, as Ruoss et al.'s example)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="demo_runs", help="directory for the two runs and the plot")
    p.add_argument("--no-progress", action="store_true")
    add_device_arguments(p, defaults=True)
    p.set_defaults(func=run)


def run(args) -> int:
    set_threads(args.threads)
    out = Path(args.out)
    check_writable(out)  # before the first of the two trainings
    records = {}
    for positions in ("standard", "randomized"):
        cfg = TrainConfig(task=args.task, model=ModelConfig(pe=args.pe), positions=positions,
                          steps=args.steps, train_length=args.train_length, max_length=args.max_length,
                          eval_samples=args.eval_samples, lr=args.lr, seed=args.seed,
                          checkpoint_every=max(1, args.steps // 5), device=args.device,
                          precision=args.precision)
        label = f"{args.pe} ({positions} positions)"
        print(f"\n== {label} ==")
        records[label] = train(cfg, out / f"{args.pe}-{positions}", progress=not args.no_progress)

    labels = list(records)
    bands = [b["lengths"] for b in records[labels[0]]["bands"]]
    rows = [[band] + [next(b["accuracy"] for b in records[l]["bands"] if b["lengths"] == band) for l in labels]
            for band in bands]
    rows.append([f"score ({args.train_length + 1}-{args.max_length})"] + [records[l]["score"] for l in labels])
    print(f"\n{args.task}: accuracy by length band (trained on 1-{args.train_length})")
    print(format_table(["lengths"] + labels, rows))
    curves = {l: {int(n): a for n, a in records[l]["accuracy_by_length"].items()} for l in labels}
    plot_path = out / "demo_accuracy.png"
    plot_accuracy(curves, args.train_length, plot_path, title=f"{args.task}: standard vs randomized positions")
    print(f"\nplot: {plot_path}   runs: {out}/")
    return 0
