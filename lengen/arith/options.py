"""`lengen arith train` options as data: option name (the flag without dashes) -> ArithConfig path,
the one function that turns options into a config, and an option's type and values for sweep
files (as lengen.lm.options)."""

from __future__ import annotations

import functools

from lengen.arith.config import ArithConfig
from lengen.options import coerce_value, config_from_table, table_types, table_values

ARITH_OPTIONS = {
    "task": "task", "format": "format", "pe": "pe", "pe_options": "model.pe_options", "positions": "positions",
    "abacus_k": "abacus_k", "train_digits": "train_digits", "test_digits": "test_digits",
    "max_operands": "max_operands", "b_digits": "b_digits",
    "layers": "model.num_layers", "heads": "model.num_heads", "d_model": "model.d_model", "d_ff": "model.d_ff",
    "dropout": "model.dropout", "max_position": "model.max_position",
    "steps": "steps", "batch_size": "batch_size", "lr": "lr", "warmup": "warmup", "weight_decay": "weight_decay",
    "grad_clip": "grad_clip", "seed": "seed", "checkpoint_every": "checkpoint_every", "log_every": "log_every",
    "eval_samples": "eval_samples", "eval_seed": "eval_seed", "eval_batch": "eval_batch",
    "device": "device", "precision": "precision",
}


def arith_config_from_options(options: dict) -> ArithConfig:
    """An ArithConfig from option values (names as in ARITH_OPTIONS) on top of the defaults."""
    return config_from_table(ArithConfig, ARITH_OPTIONS, options)


@functools.cache
def _field_types() -> dict[str, object]:
    return table_types(ArithConfig, ARITH_OPTIONS)


def coerce_arith_option(name: str, value):
    """`value` as the type option `name` takes, or LengenError (lengen.options.coerce_value)."""
    return coerce_value(name, value, _field_types()[name])


def arith_option_values(cfg: ArithConfig) -> dict:
    """Every option's value in a config, by option name (for results tables)."""
    return table_values(cfg, ARITH_OPTIONS)
