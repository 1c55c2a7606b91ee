"""`lengen demo`: the point of the project in a few CPU minutes. One task, trained on short
lengths with RoPE at standard positions and at randomized positions, evaluated on lengths up to
3x the training length: a table of accuracy per length band and a plot of both curves."""

from __future__ import annotations

import argparse

from lengen.cli.parsers.common import add_device_arguments


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
    p.set_defaults(func="lengen.cli.demo:run")
