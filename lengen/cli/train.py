"""`lengen train`: train a CHE model on lengths 1..N and evaluate it on 1..M."""

from __future__ import annotations

from pathlib import Path

from lengen.cli.options import format_table, options_from_args, set_threads
from lengen.io import check_writable
from lengen.che.config import TRAIN_OPTIONS, TrainConfig
from lengen.che.loop import train
from lengen.che.options import check_given_options, config_from_options


def config_from_args(args) -> TrainConfig:
    given = options_from_args(args, TRAIN_OPTIONS)
    cfg = config_from_options(given, preset=getattr(args, "preset", None))
    check_given_options(given, cfg.model.architecture)  # a flag given on the command line is a request
    return cfg


def print_eval(record: dict, model: str = "transformer") -> None:
    if model != "transformer":  # a recurrent model: its record's pe and positions are unused defaults
        print(f"\n{record['task']}  model={model}")
    else:
        label = record.get("label", f"pe={record['pe']}")  # records before labels: the pe alone
        print(f"\n{record['task']}  {label}  positions={record['positions']}  "
              f"test positions={record['test_positions']}")
    rows = [[b["lengths"], b["accuracy"]] for b in record["bands"]]
    print(format_table(["lengths", "accuracy"], rows))
    if record["score"] is not None:
        print(f"score (mean accuracy over {record['train_length'] + 1}..{record['max_length']}): "
              f"{record['score']:.3f}")


def run(args) -> int:
    set_threads(args.threads)
    cfg = config_from_args(args)
    variant = cfg.model.architecture if cfg.model.recurrent else f"{cfg.model.pe}-{cfg.positions}"
    out = args.out or f"runs/{cfg.task}-{variant}-s{cfg.seed}"
    check_writable(out)  # before the model is built: a read-only --out fails now, not at the first checkpoint
    record = train(cfg, out, progress=not args.no_progress)
    print_eval(record, cfg.model.architecture)
    print(f"run directory: {Path(out)}  (eval.json, accuracy.png, metrics.jsonl)")
    return 0
