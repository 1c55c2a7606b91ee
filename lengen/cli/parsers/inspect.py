"""`lengen inspect`: look inside one trained CHE model: attention maps of every layer and a 2-D
PCA of every block's output, at the training length N and a longer length L."""

from __future__ import annotations

import argparse

from lengen.cli.parsers.common import DEVICE_HELP


EPILOG = """examples:
  lengen inspect runs/rev-rope-rand                        # both figures, L = 2 x train length
  lengen inspect runs/rev-rope-rand --attention --length 100 --out figs/

Writes into RUN_DIR (or --out):
  inspect_attention_N<N>.png   attention of one sequence at the training length N; rows = layers,
  inspect_attention_L<L>.png   and at length L; left: mean over heads, right: max over heads
  inspect_activations.png      per layer, PCA of the block outputs fitted at length N (dots),
                               length L projected onto the same axes (crosses), colour = token index
  inspect_activations.json     the explained-variance ratios of the two components per layer
Positions come from the run's test-position mode. See docs/inspect.md.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("inspect", help="attention maps and activation PCA of one trained run",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by `lengen train`")
    p.add_argument("--attention", action="store_true",
                   help="attention maps at lengths N and L (with neither flag: both figures)")
    p.add_argument("--activations", action="store_true",
                   help="PCA of the block outputs (with neither flag: both figures)")
    p.add_argument("--length", type=int, metavar="L",
                   help="the longer length (default: 2 x the run's train_length N; it must fit the "
                   "model's positions, as in `lengen eval --max-length`)")
    p.add_argument("--out", metavar="DIR", help="where the figures go (default: RUN_DIR)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled sequences and positions (default 0)")
    p.add_argument("--samples", type=int, default=32, metavar="S",
                   help="sequences per length for the PCA (default 32; every token is a point)")
    g = p.add_argument_group("device")
    g.add_argument("--device", help=DEVICE_HELP)
    g.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.set_defaults(func="lengen.cli.inspect:run")
