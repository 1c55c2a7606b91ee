"""`lengen sweep`: many `lengen train` runs from one YAML grid, resumable, locally or on Ray."""

from __future__ import annotations

import textwrap

from lengen.errors import LengenError, unknown_name
from lengen.sweeps import SweepOptions, load_spec, run_sweep, sweep_status
from lengen.sweeps.export import export_sweep
from lengen.sweeps.presets import preset_names, preset_path
from lengen.sweeps.runner import check_sweep
from lengen.sweeps.spec import count_points
from lengen.sweeps.sweep_dir import SweepDir


def _point(point: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


def with_precision(spec, precision: str):
    """--precision as a fixed option of the sweep; refused where the file already says otherwise."""
    if "precision" in spec.grid or spec.fixed.get("precision", precision) != precision:
        raise LengenError(f"--precision {precision}: the sweep file already sets precision; "
                          "give it in one place")
    spec.fixed["precision"] = precision
    return spec


def run(args) -> int:
    opts = SweepOptions(backend=args.backend, device=args.device, workers=args.workers, threads=args.threads,
                        runs_per_gpu=args.runs_per_gpu, group_size=args.group_size, ray_address=args.ray_address,
                        progress=not args.no_progress, reuse=args.reuse, time_limit=args.time_limit)
    opts.validate()  # before the file is read: a bad flag is the first thing to hear about
    spec = load_spec(args.spec)
    if args.precision is not None:
        spec = with_precision(spec, args.precision)
    if args.dry_run:   # every check the real run makes, then the list; nothing is written
        runs = check_sweep(spec, args.out, opts).runs
        print(f"sweep {spec.name}: {len(runs)} runs")
        for r in runs[:20]:
            print(f"  {r.run_id}  {_point(r.point)}")
        if len(runs) > 20:
            print(f"  ... and {len(runs) - 20} more")
        return 0
    counts = run_sweep(spec, args.out, opts)
    print(f"sweep {spec.name}: {counts['done']} done, {counts['failed']} failed, {counts['pending']} pending "
          f"({counts['resumable']} with a checkpoint to resume)")   # counted as `sweep status` counts them
    first, *rest = spec.kind.tables
    print(f"results: {args.out}/{first} ({counts['results']} rows)" + "".join(f", {args.out}/{t}" for t in rest))
    if counts["failed"]:
        print(f"see `lengen sweep status {args.out}`; rerun the same command to retry the failed runs")
        return 1
    if counts["stopped"]:
        print(f"the {args.time_limit:g}-minute time limit stopped the sweep (runs in training checkpointed their "
              "last step, runs not started yet stay pending); rerun the same command to resume")
        return 3
    return 0


def status(args) -> int:
    st = sweep_status(args.dir)
    c = st["counts"]
    damaged = f"{c['damaged']} damaged (evaluated again by the next `lengen sweep run`), " if c["damaged"] else ""
    print(f"sweep {st['name']}: {st['total']} runs: {c['done']} done, {damaged}{c['running']} running, "
          f"{c['failed']} failed, {c['pending']} pending ({st['resumable']} with a checkpoint to resume)")
    if st["runner"]:
        print(f"  runner: {st['runner']}")
    elif c["pending"] or c["failed"] or c["damaged"]:
        print("  no runner: rerun `lengen sweep run` with the same file to finish it")
    for d in st["damaged"]:
        print(f"  damaged {d['run_id']} ({_point(d['point'])}): {d['problem']}")
    for r in st["running"]:
        at = f"step {r['step']}/{r['steps']}" if r["step"] is not None else "starting"
        print(f"  running {r['run_id']}: {at}")
    for f in st["failed"]:
        print(f"  failed {f['run_id']} ({_point(f['point'])}): {f['error']}\n    log: {f['log']}")
    if st["outside"]:
        done = sum(r["done"] for r in st["outside"])
        print(f"  {len(st['outside'])} runs outside the grid ({done} finished; from an earlier sweep file, "
              f"kept in history/; not in the results): {' '.join(r['run_id'] for r in st['outside'])}")
        print(f"  `lengen sweep prune {args.dir} --yes` removes them")
    return 0


def prune(args) -> int:
    sweep = SweepDir(args.dir)
    index = sweep.read_index()
    outside = sweep.outside()
    if not outside:
        print(f"sweep {index['name']}: every run directory is in the grid; nothing to prune")
        return 0
    if not args.yes:
        print(f"sweep {index['name']}: {len(outside)} runs outside the grid would be deleted "
              f"({sum(map(sweep.is_done, outside))} finished):")
        for rid in outside:
            print(f"  {rid}")
        print("rerun with --yes to delete them (their run directories, state and logs)")
        return 0
    claim = sweep.claim_runner()   # never under a running sweep
    try:
        for rid in outside:
            sweep.remove_run(rid)
    finally:
        claim.release()
    print(f"sweep {index['name']}: deleted {len(outside)} runs outside the grid")
    return 0


def export(args) -> int:
    made = export_sweep(args.dir, args.out)
    print(f"sweep {made['sweep']}: {made['finished']} of {made['planned']} runs finished, exported to {args.out}")
    if made["finished"] < made["planned"]:
        print(f"  {made['planned'] - made['finished']} runs are unfinished: a report of this export marks their cells")
    for rid, why in made["damaged"].items():
        print(f"  not exported: run {rid}: {why}; `lengen sweep run` evaluates it again")
    return 0


def presets(args) -> int:
    if args.show:
        path = preset_path(args.show)
        if path is None:
            raise LengenError(unknown_name("sweep preset", args.show, preset_names()))
        print(path.read_text(), end="")
        return 0
    for name in preset_names():
        spec = load_spec(name)
        print(f"{name}  ({count_points(spec):,} runs)")  # presets expand without duplicates (tested)
        print(textwrap.fill(spec.description, width=96, initial_indent="    ", subsequent_indent="    "))
    print("\nrun one: lengen sweep run NAME --out DIR;  see its file: lengen sweep presets --show NAME")
    return 0
