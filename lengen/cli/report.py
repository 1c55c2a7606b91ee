"""`lengen report`: the seed paper's tables and figures from a sweep folder."""

from __future__ import annotations

from pathlib import Path

from lengen import reports  # build_report by attribute: a test can stand in for it
from lengen.errors import LengenError
from lengen.io import check_writable
from lengen.reports.che import file_variant_labels, variant_runs
from lengen.reports.che_compare import compare_variants, comparison_markdown, resolve_variant, versus, versus_markdown
from lengen.reports.lm_compare import lm_versus_text
from lengen.reports.mlm_compare import mlm_versus_text
from lengen.sweeps.kinds.lm import metric_of, protocol_of
from lengen.sweeps.sweep_dir import SweepDir


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
    data = reports.load_sweep(sweep_dir)
    runs = variant_runs(data)
    named = file_variant_labels(data, runs)   # the sweep file's variant names stand for their labels
    a, b = (resolve_variant(runs, v, flag, named) if v is not None else None for v in (a, b))
    if b:
        print(comparison_markdown(compare_variants(runs, a, b), a, b))
    else:
        print(versus_markdown(versus(runs, a), a), end="")
    print(f"differences in points of score (x 100) over cells (task, lr, seed) where both finished; "
          f"interval: 95% t over the cells")
    return 0
