"""`lengen eval`: evaluate a trained run at other lengths or with another test-position mode."""

from __future__ import annotations

import argparse

from lengen.cli.parsers.common import add_device_arguments


EPILOG = """examples:
  lengen eval runs/rev-rope-rand --positions uniform              # evenly spaced test positions
  lengen eval runs/rev-rope-rand --max-length 300 --positions standard --eval-samples 128

Writes eval_<mode>_M<max-length>.json and accuracy_<mode>_M<max-length>.png into the run directory
(the eval.json written by training is kept).
"""


def add_parser(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a trained run at other lengths or position modes",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by `lengen train`")
    p.add_argument("--max-length", type=int, metavar="M", help="evaluate lengths 1..M (default: the run's)")
    p.add_argument("--positions", choices=["random", "uniform", "standard"],
                   help="test-time positions (default: the run's)")
    p.add_argument("--eval-samples", type=int, help="samples per length (default: the run's)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_device_arguments(p)
    p.set_defaults(func="lengen.cli.evaluate:run")
