"""`lengen` command line. Each command group has a parser module, lengen.cli.parsers.NAME, with
`add_parser(subparsers)`, which names the command's handler as a string ("lengen.cli.train:run",
in lengen.cli.NAME); `main` imports that handler after parsing (`handler`), the one place the
command line loads a command's implementation. So building the parser, and every `--help`, loads
no torch (tests/test_imports.py). Adding a command is one parser module, one handler module and
one line in COMMANDS."""

from __future__ import annotations

import argparse
import errno
import importlib
import math
import os
import sys

from lengen.errors import LengenError, did_you_mean

# module names under lengen.cli.parsers, in the order `lengen --help` lists them
COMMANDS = ["demo", "train", "evaluate", "inspect", "sweep", "report", "tasks", "presets", "lm", "mlm", "arith", "hf", "env"]

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
        print(handler("lengen.environment:one_line")())
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
        importlib.import_module(f"lengen.cli.parsers.{name}").add_parser(sub)
    return parser


def handler(name: str):
    """The function a parser names as "module:function", imported now: after parsing, so that
    building the parser (and --help) imports no command's implementation."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command and subcommand of `parser` by its argv prefix (("train",), ("sweep", "run"), ...),
    in the order the help lists them."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[prefix + (name,)] = sub
                found.update(commands(sub, prefix + (name,)))
    return found


def command_paths(parser: argparse.ArgumentParser) -> list[tuple[str, ...]]:
    """The argv prefix of every command and subcommand: what the help tests and
    benchmarks/cli_help.py walk."""
    return list(commands(parser))


def handlers(parser: argparse.ArgumentParser) -> dict[tuple[str, ...], str]:
    """The "module:function" each command names (a group's own help printer is not one)."""
    named = {path: sub.get_default("func") for path, sub in commands(parser).items()}
    return {path: func for path, func in named.items() if isinstance(func, str)}


def check_finite_flags(args) -> None:
    """argparse's float() takes nan, inf and 1e999 (inf); no lengen flag means anything by them."""
    for dest, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise LengenError(f"--{dest.replace('_', '-')} must be a finite number, got {value}")


#: what to do about an OSError that reached the top level, by errno
_OS_HINTS = {
    errno.ENOSPC: "free some space or write elsewhere (another --out), then rerun the same command: runs "
                  "resume from their last checkpoint",
    errno.EDQUOT: "free some space or write elsewhere (another --out), then rerun the same command",
    errno.EROFS: "choose a writable place (another --out)",
    errno.EACCES: "choose a writable place (another --out) or change the folder's permissions",
    errno.EPERM: "choose a writable place (another --out) or change the folder's permissions",
    errno.ENOTDIR: "a file stands where a folder is needed: choose another place (another --out)",
    errno.EEXIST: "something already stands at that path: choose another place (another --out)",
    errno.EISDIR: "a folder stands where a file is needed",
}


def os_error_message(e: OSError) -> str:
    """One line for an OSError that no up-front check caught: PATH: STRERROR; what to do."""
    where = f"{e.filename}: " if e.filename else ""
    hint = _OS_HINTS.get(e.errno)
    return f"{where}{e.strerror or e}" + (f"; {hint}" if hint else "")


def parse(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """parser.parse_args, with a did-you-mean for an unknown flag among the flags of the command
    typed (`lengen train --stpes 10`: --steps), on every Python (argparse has none before 3.12)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        typed = sys.argv[1:] if argv is None else argv
        found, path = commands(parser), ()
        for token in typed:  # the command typed: the longest run of its leading words
            if (*path, token) not in found:
                break
            path = (*path, token)
        flags = [s for a in (found[path] if path else parser)._actions for s in a.option_strings]
        guess = next(filter(None, (did_you_mean(x.split("=")[0], flags) for x in extra if x.startswith("--"))), None)
        parser.error(f"unrecognized arguments: {' '.join(extra)}" + (f" (did you mean {guess}?)" if guess else ""))
    return args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse(parser, argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        check_finite_flags(args)
        func = handler(args.func) if isinstance(args.func, str) else args.func  # a group's help printer
        return int(func(args) or 0)
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
    except OSError as e:  # the last net (after BrokenPipeError, one of its kind): a disk that filled up
        # mid-run, a folder that changed under us. Files are written atomically, so nothing is half-written.
        print(f"lengen: error: {os_error_message(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
