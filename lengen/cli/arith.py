"""`lengen arith`: arithmetic length generalization (McLeish et al. 2024, Abacus embeddings; Cho et
al. 2024, position coupling): train a small causal decoder on additions or multiplications of up
to N digits, evaluate it on every (digits of a, digits of b) up to M (docs/arithmetic.md)."""

from __future__ import annotations

from pathlib import Path

from lengen import io
from lengen.arith.evaluate import evaluate_run
from lengen.arith.options import ARITH_OPTIONS, arith_config_from_options
from lengen.arith.plots import close, heatmap_figure
from lengen.arith.train import train_arith
from lengen.cli.options import format_table, options_from_args, set_threads
from lengen.io import check_writable
from lengen.training.run_dir import check_output_file

#: --out's default (str.format with the run's config as `cfg`)
RUN_DIR = "runs/arith-{cfg.task}-{cfg.pe}-{cfg.positions}-N{cfg.train_digits}-s{cfg.seed}"


def print_result(result: dict) -> None:
    cells = {(c["i"], c["j"]): c["accuracy"] for c in result["cells"]}
    rows = sorted({i for i, _ in cells})
    cols = sorted({j for _, j in cells})
    a, b = result["cell_axes"]
    print(f"exact match (%), {a} down, {b} across (trained on 1..{result['train_digits']} digits)")
    print(format_table([f"{a} \\ {b}", *map(str, cols)],
                       [[i, *(f"{100 * cells[(i, j)]:.0f}" if (i, j) in cells else "" for j in cols)] for i in rows]))
    by_length = result["accuracy_by_length"]
    print("\naccuracy against length: " + ", ".join(f"{n}: {100 * v:.0f}%" for n, v in by_length.items()))
    ood = result["out_of_distribution"]
    print(f"in distribution {100 * result['in_distribution']:.1f}%"
          + (f", out of distribution {100 * ood:.1f}%" if ood is not None else ""))


def run_train(args) -> int:
    set_threads(args.threads)
    cfg = arith_config_from_options(options_from_args(args, ARITH_OPTIONS))
    cfg.validate()  # every bad option before the run directory is touched
    out = args.out or RUN_DIR.format(cfg=cfg)
    check_writable(out)
    record = train_arith(cfg, out, progress=not args.no_progress)
    loss = record["train_loss"]  # None after --steps 0: no step, no loss
    print(f"\n{record['parameters']:,} parameters, {record['steps']} steps"
          + (f", training loss {loss:.4f}" if loss is not None else ""))
    print_result(record)
    print(f"run directory: {out}  (config.json, checkpoint.pt, metrics.jsonl, eval.json)")
    return 0


def run_eval(args) -> int:
    set_threads(args.threads)
    if args.out is not None:  # a folder, or a file another command owns: refused before the evaluation
        for path in (Path(args.out), Path(args.out).with_suffix(".png")):
            check_output_file(path, args.force)
    check_writable(Path(args.out).parent if args.out else args.run_dir)
    result = evaluate_run(args.run_dir, args.test_digits, args.samples, args.seed, args.device, args.precision,
                          progress=not args.no_progress)
    out = args.out or f"{args.run_dir}/eval-arith-{result['test_digits']:02d}.json"
    io.write_json(Path(out), result)
    figure = Path(out).with_suffix(".png")
    fig = heatmap_figure({(c["i"], c["j"]): c["accuracy"] for c in result["cells"]}, result["cell_axes"],
                         result["train_digits"], f"{args.run_dir}: {result['label']} / {result['positions']}, "
                         f"step {result['steps']}")
    io.save_figure(figure, fig)
    close(fig)
    print_result(result)
    print(f"wrote {out} and {figure} (the heat map)")
    return 0
