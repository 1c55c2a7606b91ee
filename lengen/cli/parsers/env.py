"""`lengen env`: the versions and devices lengen runs with (lengen and its commit, Python, torch and
its CUDA build, the GPUs torch sees, threads, transformers and the other libraries). Paste its
output into a bug report."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("env", help="print lengen, torch, transformers, CUDA and device versions "
                       "(for bug reports)", description=__doc__)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func="lengen.cli.env:run")
