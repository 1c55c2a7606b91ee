"""`command: arith`: arithmetic runs (McLeish et al.'s Abacus embeddings, Cho et al.'s position
coupling; docs/arithmetic.md). The grid holds `lengen arith train` options; a run's evaluation (the
heat map up to test_digits, eval_samples problems per cell) is part of its config, so it has no
`eval:` section:

    command: arith
    grid: {seed: [0, 1, 2], pe: [rope, abacus, learned], positions: [standard, coupled]}
    fixed: {task: addition, train_digits: 5, test_digits: 8, steps: 3000}

The long table (arith_by_cell.csv) has one row per run and cell: `length` is the cell's first
coordinate (digits of a; of the longest operand for multi_addition), `j` its second (digits of b;
the number of operands).
"""

from __future__ import annotations

import copy

import torch

from lengen import io
from lengen.arith.config import ArithConfig
from lengen.arith.model import build_model
from lengen.arith.options import ARITH_OPTIONS, arith_config_from_options, arith_option_values, coerce_arith_option
from lengen.arith.train import train_arith
from lengen.training.corpus_loop import EVAL_FILE
from lengen.sweeps.kinds.base import SweepKind
from lengen.training.run_dir import config_digest

#: a row of the long table, less the run_id: the cell's second coordinate, its first, the counts
CELL_COLUMNS = ("j", "length", "correct", "total", "accuracy")


class ArithKind(SweepKind):
    name = "arith"
    command = "lengen arith train"
    cheap_fields = ("seed", "lr", "steps", "warmup", "weight_decay", "grad_clip", "batch_size", "checkpoint_every",
                    "log_every", "eval_samples", "eval_seed", "eval_batch", "test_digits", "precision", "device")
    tables = ("results.csv", "arith_by_cell.csv")
    leading_columns = ("run_id", "task", "pe", "positions", "seed", "train_digits", "test_digits")
    trailing_columns = ("train_loss", "in_distribution", "out_of_distribution", "accuracy", "parameters",
                        "seconds", "train_seconds", "eval_seconds", "device")
    config_columns = ("task", "pe", "positions", "seed", "train_digits", "test_digits")

    def options(self) -> list[str]:
        return sorted(set(ARITH_OPTIONS) - {"device"})

    def option_values(self, cfg) -> dict:
        return arith_option_values(cfg)

    def coerce(self, name: str, value):
        return coerce_arith_option(name, value)

    def config(self, options: dict, grid_keys: frozenset = frozenset()):
        cfg = arith_config_from_options(options)
        cfg.validate()
        return cfg

    def config_from_dict(self, d: dict):
        return ArithConfig.from_dict(d)

    def check(self, cfg, evaluation) -> None:
        # shapes and options only: no memory, and no number drawn from anyone's stream
        with torch.random.fork_rng(), torch.device("meta"):
            build_model(copy.deepcopy(cfg))

    def done_file(self, evaluation) -> str:
        return EVAL_FILE  # the LM loop writes it last, after the evaluation

    def records(self, cfg, done_file, evaluation) -> dict[str, dict]:
        # the training's record, its heat map included (an `arith eval` record has no training loss)
        return {done_file: {"config_digest": config_digest(cfg), "steps": cfg.steps, "task": cfg.task, "pe": cfg.pe,
                            "positions": cfg.positions, "format": cfg.format, "train_digits": cfg.train_digits,
                            "test_digits": cfg.test_digits, "samples_per_cell": cfg.eval_samples,
                            "eval_seed": cfg.eval_seed}}

    def execute(self, path, cfg, evaluation, done_file, on_log) -> str:
        record = train_arith(cfg, path, progress=False, on_log=on_log, note=None)  # named by `sweep run`
        ood = record["out_of_distribution"]
        return (f"in distribution {100 * record['in_distribution']:.1f}%"
                + (f", out of distribution {100 * ood:.1f}%" if ood is not None else ""))

    def by_length_columns(self, evaluation) -> list[str]:
        return ["run_id", *CELL_COLUMNS]

    def rows_of(self, path, done, evaluation) -> tuple[dict, list[tuple]]:
        result = {k: done[k] for k in ("train_loss", "in_distribution", "out_of_distribution", "accuracy",
                                        "parameters", "train_seconds", "eval_seconds")}
        result["device"] = done.get("environment", {}).get("device")
        return result, [(c["j"], c["i"], c["correct"], c["total"], c["accuracy"]) for c in done["cells"]]


ARITH = ArithKind()
