"""`lengen lm train` options as data: option name (the flag without dashes) -> LMConfig path, and
the one function that turns options into an LMConfig."""

from __future__ import annotations

import functools

from lengen.lm.config import LMConfig
from lengen.options import coerce_value, config_from_table, table_types, table_values

# option name -> LMConfig path ("model." prefix: ModelConfig)
LM_OPTIONS = {
    "pe": "model.pe", "pe_options": "model.pe_options", "layers": "model.num_layers", "heads": "model.num_heads",
    "d_model": "model.d_model", "d_ff": "model.d_ff", "dropout": "model.dropout",
    "max_position": "model.max_position", "logit_scale": "model.logit_scale",
    "logit_scale_options": "model.logit_scale_options", "layer_pe": "model.layer_pe", "corpus": "corpus",
    "val_fraction": "val_fraction", "train_length": "train_length", "positions": "positions",
    "position_options": "position_options", "steps": "steps",
    "batch_size": "batch_size", "lr": "lr", "warmup": "warmup", "weight_decay": "weight_decay",
    "grad_clip": "grad_clip", "seed": "seed", "checkpoint_every": "checkpoint_every",
    "log_every": "log_every", "val_windows": "val_windows", "device": "device", "precision": "precision",
}


@functools.cache
def _field_types() -> dict[str, object]:
    return table_types(LMConfig, LM_OPTIONS)


def coerce_lm_option(name: str, value):
    """`value` as the type option `name` takes, or LengenError (lengen.options.coerce_value)."""
    return coerce_value(name, value, _field_types()[name])


def lm_option_values(cfg: LMConfig) -> dict:
    """Every option's value in a config, by option name (for results tables)."""
    return table_values(cfg, LM_OPTIONS)


def lm_config_from_options(options: dict) -> LMConfig:
    """An LMConfig from option values (names as in LM_OPTIONS) on top of the LMConfig defaults."""
    return config_from_table(LMConfig, LM_OPTIONS, options)
