"""`lengen sweep`: many `lengen train` runs from one YAML grid, resumable, locally or on Ray."""

from __future__ import annotations

import argparse

from lengen.cli.parsers import values
from lengen.cli.parsers.common import DEVICE_HELP, PRECISION_HELP


RUN_EPILOG = """examples:
  lengen sweep presets                                   # the shipped sweeps and their sizes
  lengen sweep run ruoss2023-mini --out sweeps/mini      # a preset, on this machine's cores
  lengen sweep run my_sweep.yaml --out sweeps/mine --dry-run
  lengen sweep run ruoss2023 --out sweeps/full --device cuda --runs-per-gpu 8
  lengen sweep run ruoss2023 --out sweeps/full --time-limit 25   # 25 minutes now, the rest when rerun
  lengen sweep run ruoss2023 --out /shared/full --backend ray --ray-address auto
  lengen sweep status sweeps/mini

A sweep file (YAML) holds `lengen train` options (dashes or underscores):
  name: mini
  grid:                     # lists: the sweep is their cross product
    task: [parity_check, bucket_sort]
    pe: [none, rope, learned]
    positions: [standard, randomized]
    seed: [0, 1, 2]
    lr: [1e-4, 3e-4]
  fixed: {steps: 2000, train_length: 20, max_length: 60}
  exclude:                  # combinations to skip (a list value means any of them)
    - {pe: none, positions: randomized}

With `command: lm` the options are `lengen lm train`'s, and an `eval:` section holds `lengen lm
eval` options for every run (RoPE methods apply to the RoPE runs, the others are evaluated plainly):
  command: lm
  grid: {pe: [rope, alibi, fire], seed: [0, 1, 2]}
  fixed: {train_length: 128, steps: 1200}
  eval: {lengths: [128, 256, 512, 1024], methods: [rope, "yarn:factor=8"]}
Results: OUT/results.csv and OUT/ppl_by_length.csv (run_id, method, length, ppl). See docs/sweeps.md.
With `command: mlm` they are `lengen mlm train`'s, and `eval:` holds `lengen mlm eval` options
(lengths, test_positions, log_n, windows, batch_size, seed, precision); the long table is
OUT/mlm_by_length.csv (docs/mlm.md, "As a sweep").

Each run lives in OUT/runs/<id>/ (a `lengen train` run directory; the id hashes its whole config).
Kill a sweep at any time and rerun the same command: finished runs are skipped, interrupted ones
resume from their last checkpoint, failed ones are retried. With --time-limit MINUTES the sweep
stops itself (training checkpoints at its current step) and exits with status 3 while runs
remain. OUT/results.csv (one row per finished run) and OUT/accuracy_by_length.csv (run_id,
length, accuracy) are rebuilt from the run directories; pandas.read_csv reads both.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="run a grid of training runs (resumable; local pool or Ray)",
                       description=__doc__)
    s = p.add_subparsers(dest="sweep_command", metavar="COMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    r = s.add_parser("run", help="run (or resume) a sweep", description="Run every unfinished run of a "
                     "sweep file or preset.", epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("spec", metavar="SPEC", help="a sweep file (YAML) or a preset name (`lengen sweep presets`)")
    r.add_argument("--out", required=True, metavar="DIR", help="the sweep folder (created; reused to resume)")
    r.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="local: a process pool on this machine (default); ray: Ray tasks on a cluster "
                   "(pip install \"lengen[sweep]\")")
    r.add_argument("--device", default="auto", help=DEVICE_HELP)
    r.add_argument("--precision", choices=values.PRECISIONS, help=PRECISION_HELP + "; for every run, unless the "
                   "file sets `precision` (it is part of each run's identity: a bf16 run is another run)")
    r.add_argument("--workers", type=int, help="local: runs at once (default: CPU cores / --threads; on "
                   "GPUs --runs-per-gpu x GPUs)")
    r.add_argument("--threads", type=int, help="torch CPU threads per run (default 1 on the CPU; on GPUs "
                   "cores / workers)")
    r.add_argument("--runs-per-gpu", type=int, default=8, metavar="K",
                   help="runs sharing each GPU: one small model leaves most of a GPU idle (default 8: 5.4x "
                   "the model-steps/s of one run on an H100)")
    r.add_argument("--group-size", type=int, metavar="G",
                   help="train up to G runs that differ only in seed, lr, grad clip, dropout or evaluation "
                   "settings together, one set of kernels for all (lengen.che.group; each keeps its own "
                   "run directory). On the CPU a grouped run equals the same run alone up to float rounding, "
                   "dropout included (each member draws its own masks); on CUDA its dropout masks are other "
                   "draws, so there its numbers differ as another seed's would. Default 1 (every run alone). Measured on a 2-core CPU "
                   "(docs/results/speed.md): a group of 8 paper-sized models trains at 0.82-0.88x the speed of "
                   "the 8 one after another; tiny models gain 1.9-4.6x (groups of 8-128). On an H100 one group "
                   "of 64 trained at 7.6x, of 512 at 10.8x one model alone; sweeps of groups sharing a GPU "
                   "are not measured yet")
    r.add_argument("--ray-address", help="Ray cluster address (default: $RAY_ADDRESS, else a local Ray instance)")
    r.add_argument("--dry-run", action="store_true", help="make every check the real run makes (the file, "
                   "the folder, the device or Ray cluster, another runner) and list the runs; write and "
                   "run nothing")
    r.add_argument("--reuse", metavar="OTHER_DIR",
                   help="another sweep's folder: its runs whose run id is in this grid (the same configuration; "
                        "finished or with a checkpoint) are copied in before running, and evaluated with this "
                        "sweep's eval: section where it differs (e.g. fire2024-mini reuses methods2025-lm-mini's "
                        "RoPE, NoPE and FIRE runs)")
    r.add_argument("--time-limit", type=float, metavar="MINUTES",
                   help="stop after MINUTES of wall clock: no run starts after it, and runs in training save a "
                        "checkpoint at their next step and stop (exit status 3); the same command resumes them. "
                        "For machines lent by the hour, scheduler time limits, and long studies in chunks")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.set_defaults(func="lengen.cli.sweep:run")

    st = s.add_parser("status", help="done / running / failed / pending runs of a sweep folder",
                      description="Counts of a sweep folder's runs by state, and each failed run's error and log.")
    st.add_argument("dir", metavar="DIR", help="a folder written by `lengen sweep run`")
    st.set_defaults(func="lengen.cli.sweep:status")

    pn = s.add_parser("prune", help="delete run directories that are not in the sweep's grid",
                      description="Delete the runs of a sweep folder that its current sweep file no "
                      "longer has (runs of an earlier version of the file; `sweep status` lists them). "
                      "Without --yes, only lists them.")
    pn.add_argument("dir", metavar="DIR", help="a folder written by `lengen sweep run`")
    pn.add_argument("--yes", action="store_true", help="delete them (run directories, state and logs)")
    pn.set_defaults(func="lengen.cli.sweep:prune")

    ex = s.add_parser("export", help="a sweep's results as small files to keep (no run directories)",
                      description="Write a sweep's results tables, its sweep file and each finished run's "
                      "environment (lengen commit, torch/transformers versions, device, threads) into a new "
                      "folder: a few small files to commit beside a paper or a doc. `lengen report` reads "
                      "the export as it reads the sweep folder.",
                      epilog="example:\n  lengen sweep export sweeps/mini --out docs/data/studies/ruoss2023-mini\n"
                             "  lengen report docs/data/studies/ruoss2023-mini --out /tmp/report",
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    ex.add_argument("dir", metavar="DIR", help="a folder written by `lengen sweep run`")
    ex.add_argument("--out", required=True, metavar="EXPORT_DIR",
                    help="the folder to write (new, or an earlier export of the same sweep: rewritten)")
    ex.set_defaults(func="lengen.cli.sweep:export")

    pr = s.add_parser("presets", help="the sweeps shipped with lengen",
                      description="The sweep presets shipped with lengen: name, runs, description.")
    pr.add_argument("--show", metavar="NAME", help="print one preset's YAML (copy it to make your own)")
    pr.set_defaults(func="lengen.cli.sweep:presets")
