"""`lengen report`: the seed paper's tables and figures from a sweep folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from lengen import reports  # build_report by attribute: a test can stand in for it
from lengen.io import check_writable
from lengen.sweeps.sweep_dir import SweepDir

EPILOG = """examples:
  lengen report sweeps/mini                         # writes sweeps/mini/report/
  lengen report sweeps/full --out reports/full      # then open reports/full/index.html

A language-model sweep (`command: lm`) gets the FIRE paper's table instead: lm_table.md/.csv (log
perplexity per encoding and method (rows) and length (columns), mean +- std over seeds, best per
column in bold, the training length marked), ppl_vs_length.png/.svg and index.html.

For a CHE sweep: writes table1.md/.csv (best score per task and encoding over learning rates and seeds),
table4.md/.csv (mean +- std over seeds at the best learning rate), table2.md/.csv (time per run),
comparison.md/.csv (beside the published Table 1, when the sweep's tasks and encodings are the
paper's), fig4_<task>.png/.svg (accuracy against length), fig3_max_position.png when the sweep
varies max_position, and index.html holding all of them (offline: no network needed). Works on an
unfinished sweep: missing cells are marked and listed.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="the paper's tables and figures from a sweep folder",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep_dir", metavar="SWEEP_DIR", help="a folder written by `lengen sweep run`")
    p.add_argument("--out", metavar="REPORT_DIR", help="where to write (default SWEEP_DIR/report)")
    p.set_defaults(func=run)


def run(args) -> int:
    out = Path(args.out) if args.out else Path(args.sweep_dir) / "report"
    reports.sweep_command(args.sweep_dir)  # not a sweep folder: that message first
    check_writable(out, "choose another --out" if args.out else "give --out a writable folder")
    rep = reports.build_report(args.sweep_dir, out)
    for text in rep["summary"]:
        print(text)
    _say_outside(args.sweep_dir)
    print(f"report: {out}/index.html")
    return 0


def _say_outside(sweep_dir) -> None:
    """Runs of an earlier sweep file, left out of the tables: say so, and how to remove them."""
    sweep = SweepDir(sweep_dir)
    outside = sweep.outside()
    if outside:
        print(f"{len(outside)} runs in {sweep.path / 'runs'} are not in the sweep's grid (an earlier sweep "
              f"file's; kept in history/) and not in these tables: `lengen sweep status` lists them")
