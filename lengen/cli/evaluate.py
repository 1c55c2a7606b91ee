"""`lengen eval`: evaluate a trained run at other lengths or with another test-position mode."""

from __future__ import annotations

from lengen.cli.options import set_threads
from lengen.cli.train import print_eval
from lengen.errors import LengenError
from lengen.io import check_writable
from lengen.che.config import TrainConfig
from lengen.che.loop import evaluate_run
from lengen.training.run_dir import RunDir
from lengen.positions import default_test_mode


def run(args) -> int:
    set_threads(args.threads)
    run_dir = RunDir(args.run_dir)
    cfg = TrainConfig.from_dict(run_dir.read_config(), where=str(run_dir.path))
    # the results go into the run directory: a read-only one is refused before the model is loaded
    check_writable(run_dir.path, "copy the run directory somewhere writable and evaluate the copy")
    if args.device is not None:
        cfg.device = args.device
    if args.precision is not None:
        cfg.precision = args.precision
    if args.max_length is not None and args.max_length < 1:
        raise LengenError(f"--max-length must be >= 1, got {args.max_length}")
    if args.eval_samples is not None and args.eval_samples < 1:
        raise LengenError(f"--eval-samples must be >= 1, got {args.eval_samples}")
    max_length = args.max_length or cfg.max_length
    mode = args.positions or cfg.test_positions or default_test_mode(cfg.positions)
    record = evaluate_run(run_dir, cfg=cfg, test_mode=mode, max_length=max_length,
                          eval_samples=args.eval_samples, progress=not args.no_progress,
                          suffix=f"_{mode}_M{max_length}")
    print_eval(record)
    print(f"wrote {run_dir.file(f'eval_{mode}_M{max_length}.json')}")
    return 0
