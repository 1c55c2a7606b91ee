"""`lengen demo`: the point of the project in a few CPU minutes. One task, trained on short
lengths with RoPE at standard positions and at randomized positions, evaluated on lengths up to
3x the training length: a table of accuracy per length band and a plot of both curves."""

from __future__ import annotations

from pathlib import Path

from lengen.cli.options import format_table, set_threads
from lengen.io import check_writable
from lengen.models.config import ModelConfig
from lengen.che.config import TrainConfig
from lengen.che.loop import train
from lengen.che.plots import plot_accuracy


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
