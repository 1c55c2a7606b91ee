"""`lengen mlm train` options as data: option name (the flag without dashes) -> MLMConfig path,
and the one function that turns options into an MLMConfig (as lengen.lm.options)."""

from __future__ import annotations

from lengen.mlm.config import MLMConfig
from lengen.options import config_from_table

MLM_OPTIONS = {
    "pe": "model.pe", "pe_options": "model.pe_options", "layers": "model.num_layers", "heads": "model.num_heads",
    "d_model": "model.d_model", "d_ff": "model.d_ff", "dropout": "model.dropout",
    "max_position": "model.max_position", "key_norm": "model.key_norm",
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
