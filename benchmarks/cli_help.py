"""How fast the command line starts: `lengen --help` and each `lengen CMD --help` (commands found
in the parser), each in a fresh interpreter, median of --repeats runs, against `python -c pass`
timed in the same run (so a busy machine shows as a larger baseline, not as a slower CLI). Also
counts the modules each help loads and names the heavy ones among them (none is the goal).

    python benchmarks/cli_help.py                  # every command, 5 runs each
    python benchmarks/cli_help.py --repeats 3 --subcommands

Target (issue 49): every help under 0.5 s on an idle 2-core machine. Not a timed test: the
import test (tests/test_imports.py) checks that no heavy library loads; this measures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from lengen.cli import build_parser, command_paths
from lengen.formatting import format_table

TARGET_S = 0.5
HEAVY = ("torch", "scipy", "pandas", "matplotlib", "transformers")

#: run in a fresh interpreter: the help of argv, then what it loaded
COUNT = """
import contextlib, io, json, sys
from lengen.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
top = {m.split(".")[0] for m in sys.modules}
print(json.dumps([len(sys.modules), sorted(top & set(%r))]))
""" % (HEAVY,)


def seconds(argv: list[str], repeats: int) -> float:
    """Median wall seconds of `argv` in a fresh process, output discarded."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="runs per command, median reported (5)")
    ap.add_argument("--subcommands", action="store_true", help="also `lengen CMD SUB --help`")
    args = ap.parse_args()

    paths = [p for p in command_paths(build_parser()) if args.subcommands or len(p) == 1]
    baseline = seconds([sys.executable, "-c", "pass"], args.repeats)
    rows = []
    for path in [(), *paths]:
        t = seconds([sys.executable, "-m", "lengen", *path, "--help"], args.repeats)
        modules, heavy = json.loads(subprocess.run([sys.executable, "-c", COUNT, *path, "--help"], check=True,
                                                   capture_output=True, text=True).stdout)
        rows.append([" ".join(["lengen", *path, "--help"]), f"{t:.2f}", f"{t / baseline:.1f}", modules,
                     ", ".join(heavy) or "-"])
    print(f"CLI start, median of {args.repeats} fresh processes; baseline `python -c pass`: {baseline:.3f} s")
    print(format_table(["command", "s", "x baseline", "modules", "heavy imports"], rows))
    worst = max(float(r[1]) for r in rows)
    print(f"\ntarget: every help < {TARGET_S} s on an idle 2-core machine; slowest here {worst:.2f} s "
          f"({'met' if worst < TARGET_S else 'not met'} on this machine, now)")


if __name__ == "__main__":
    main()
