"""`lengen report`: the seed paper's tables and figures from a sweep folder."""

from __future__ import annotations

import argparse


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
    p.set_defaults(func="lengen.cli.report:run")
