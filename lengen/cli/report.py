"""`lengen report`: the seed paper's tables and figures from a sweep folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from lengen import reports  # build_report by attribute: a test can stand in for it
from lengen.errors import LengenError
from lengen.io import check_writable
from lengen.reports.che import variant_runs
from lengen.reports.compare import compare_variants, comparison_markdown, versus, versus_markdown
from lengen.reports.lm_compare import lm_versus_text
from lengen.reports.mlm_compare import mlm_versus_text
from lengen.sweeps.kinds.lm import metric_of, protocol_of
from lengen.sweeps.sweep_dir import SweepDir

EPILOG = """examples:
  lengen report sweeps/mini                         # writes sweeps/mini/report/
  lengen report sweeps/full --out reports/full      # then open reports/full/index.html

A language-model sweep (`command: lm`) gets the FIRE paper's table instead: lm_table.md/.csv (log
perplexity per encoding and method (rows) and length (columns), mean +- std over seeds, best per
column in bold, the training length marked), ppl_vs_length.png/.svg and index.html. A masked-LM
sweep (`command: mlm`) gets the table of Su's MLM study: mlm_table.md/.csv (accuracy and bits per
byte per training positions, test positions and log-n (rows) and length, mean +- sample std over
seeds with n; the CSV adds the 95% t interval), accuracy_vs_length.png/.svg and index.html.

For a CHE sweep: writes table1.md/.csv (best score per task and encoding over learning rates and seeds),
table4.md/.csv (mean +- std over seeds at the best learning rate), table2.md/.csv (time per run),
comparison.md/.csv (beside the published Table 1, when the sweep's tasks and encodings are the
paper's), fig4_<task>.png/.svg (accuracy against length), fig3_max_position.png when the sweep
varies max_position, and index.html holding all of them (offline: no network needed). Works on an
unfinished sweep: missing cells are marked and listed.

  lengen report sweeps/mini --compare r_rope rope   # two variants (Table 1's column labels)

--compare pairs the two variants' runs at the same task, learning rate and seed and prints, per task
and over all tasks, the mean difference of the score (x 100), its sample std, the 95% t interval,
the cells each side wins, and the verdict: "wins" (interval above 0), "loses" (below), "within
noise" (it holds 0) or "not shown" (fewer than 2 pairs). It writes nothing.

  lengen report sweeps/methods --versus rope        # every other variant against rope, one row each

--versus BASE pairs every other variant with BASE the same way and prints one row per variant: its
difference per task and over all tasks with the interval (n cells), its wins / losses over the
cells, and the verdict over all tasks.

  lengen report sweeps/fire-mini --versus RoPE      # a language-model sweep: lm_table.md's row labels

For a language-model sweep, --versus BASE pairs each other row of lm_table.md with BASE seed by seed
at each evaluation length and prints the mean difference of the log perplexity (accuracy for
passkey / RULER sweeps) with its 95% t interval and the verdict: a lower perplexity wins. Its last
column pairs the trained variants' own validation perplexity at the end of training (val_ppl).

  lengen report sweeps/mlm --versus "standard; test standard; log-n off"
  lengen report sweeps/mlm --compare "randomized; test uniform; log-n on" "randomized; test random; log-n on"

For a masked-LM sweep a row of mlm_table.md is named `TRAIN; test TEST; log-n on|off`; --versus and
--compare pair rows seed by seed at each length and print the difference of the masked-token
accuracy in points, its 95% t interval and the verdict (a higher accuracy wins).
"""


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="the paper's tables and figures from a sweep folder",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep_dir", metavar="SWEEP_DIR", help="a folder written by `lengen sweep run`")
    p.add_argument("--out", metavar="REPORT_DIR", help="where to write (default SWEEP_DIR/report)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="instead of the report: variant A against variant B, paired over task, lr and seed "
                        "(CHE sweeps; labels as in Table 1, e.g. r_rope rope), or two rows of a masked-LM sweep, seed "
                        "by seed at each length")
    p.add_argument("--versus", metavar="BASE",
                   help="instead of the report: every other variant against BASE, one row each, paired as "
                        "--compare pairs them (CHE sweeps; e.g. --versus rope), or, for a language-model "
                        "sweep, seed by seed at each length (e.g. --versus RoPE); for a masked-LM sweep, rows named "
                        "as `standard; test standard; log-n off`")
    p.set_defaults(func=run)


def run(args) -> int:
    out = Path(args.out) if args.out else Path(args.sweep_dir) / "report"
    command = reports.sweep_command(args.sweep_dir)  # not a sweep folder: that message first
    if args.compare and args.versus:
        raise LengenError("--compare and --versus are two questions: give one")
    if args.compare or args.versus:
        return _compare(args.sweep_dir, command, *(args.compare or [args.versus]))
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


def _compare(sweep_dir, command: str, a: str, b: str | None = None) -> int:
    """--compare A B, or --versus A (b None)."""
    flag = "--compare" if b else "--versus"
    if command == "lm" and not b:
        data = reports.load_sweep(sweep_dir)
        print(lm_versus_text(data, a), end="")
        metric = metric_of(protocol_of(data.evaluation))
        unit = "log perplexity (natural log)" if metric == "ppl" else "accuracy"
        print(f"differences variant - {a} in {unit} over the seeds where both finished; interval: 95% t "
              f"over the seeds; a win is a {'lower perplexity' if metric == 'ppl' else 'higher accuracy'}")
        return 0
    if command == "mlm":
        print(mlm_versus_text(reports.load_sweep(sweep_dir), b or a, a if b else None), end="")
        return 0
    if command != "train":
        raise LengenError(f"{flag} applies to CHE, language-model and masked-LM sweeps, not `command: {command}`")
    runs = variant_runs(reports.load_sweep(sweep_dir))
    if b:
        print(comparison_markdown(compare_variants(runs, a, b), a, b))
    else:
        print(versus_markdown(versus(runs, a), a), end="")
    print(f"differences in points of score (x 100) over cells (task, lr, seed) where both finished; "
          f"interval: 95% t over the cells")
    return 0
