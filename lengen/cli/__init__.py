"""`lengen` command line. Each command group is one module with `add_parser(subparsers)` that
sets `func` on its parser; adding a command is one module and one line in COMMANDS."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from lengen.errors import LengenError

# module names under lengen.cli, in the order `lengen --help` lists them
COMMANDS = ["demo", "train", "evaluate", "inspect", "sweep", "report", "tasks", "presets", "lm", "mlm", "hf", "env"]

EPILOG = """examples:
  lengen demo                                  # the README demo: rope vs randomized rope
  lengen tasks                                 # the 15 CHE tasks with one example each
  lengen train --task reverse_string --pe rope --positions randomized --steps 2000 --out runs/rev
  lengen eval runs/rev --max-length 300 --positions uniform
"""


class _Version(argparse.Action):
    """--version, computed only when asked (it looks at torch and the installed libraries)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from lengen.environment import one_line

        print(one_line())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lengen",
        description="A lab for Transformer length generalization: train on short sequences, "
        "evaluate on long ones.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version, help="print lengen, torch (CUDA build, GPUs), "
                        "transformers and Python versions, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"lengen.cli.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except LengenError as e:
        print(f"lengen: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lengen: interrupted; rerun the same command to resume from the last checkpoint",
              file=sys.stderr)
        return 130
    except BrokenPipeError:  # `lengen ... | head` closed the pipe: stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail again
        return 141


if __name__ == "__main__":
    sys.exit(main())
