"""`lengen mlm train` options as data: option name (the flag without dashes) -> MLMConfig path,
the one function that turns options into an MLMConfig, and an option's type and values for sweep
files (as lengen.lm.options)."""

from __future__ import annotations

import functools

from lengen.mlm.config import MLMConfig
from lengen.options import coerce_value, config_from_table, table_types, table_values

MLM_OPTIONS = {
    "pe": "model.pe", "pe_options": "model.pe_options", "layers": "model.num_layers", "heads": "model.num_heads",
    "d_model": "model.d_model", "d_ff": "model.d_ff", "dropout": "model.dropout",
    "max_position": "model.max_position", "key_norm": "model.key_norm",
    "logit_scale": "model.logit_scale", "logit_scale_options": "model.logit_scale_options", "layer_pe": "model.layer_pe",
    "corpus": "corpus", "val_fraction": "val_fraction", "train_length": "train_length",
    "positions": "positions", "position_options": "position_options", "mask_rate": "mask_rate",
    "steps": "steps", "batch_size": "batch_size", "lr": "lr", "warmup": "warmup",
    "weight_decay": "weight_decay", "grad_clip": "grad_clip", "seed": "seed",
    "checkpoint_every": "checkpoint_every", "log_every": "log_every", "val_windows": "val_windows",
    "device": "device", "precision": "precision",
}


def mlm_config_from_options(options: dict) -> MLMConfig:
    """An MLMConfig from option values (names as in MLM_OPTIONS) on top of the defaults."""
    return config_from_table(MLMConfig, MLM_OPTIONS, options)


@functools.cache
def _field_types() -> dict[str, object]:
    return table_types(MLMConfig, MLM_OPTIONS)


def coerce_mlm_option(name: str, value):
    """`value` as the type option `name` takes, or LengenError (lengen.options.coerce_value)."""
    return coerce_value(name, value, _field_types()[name])


def mlm_option_values(cfg: MLMConfig) -> dict:
    """Every option's value in a config, by option name (for results tables)."""
    return table_values(cfg, MLM_OPTIONS)
