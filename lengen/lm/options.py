"""`lengen lm train` options as data: option name (the flag without dashes) -> LMConfig path, and
the one function that turns options into an LMConfig."""

from __future__ import annotations

from lengen.errors import LengenError
from lengen.lm.config import LMConfig
from lengen.options import set_path

# option name -> LMConfig path ("model." prefix: ModelConfig)
LM_OPTIONS = {
    "pe": "model.pe", "pe_options": "model.pe_options", "layers": "model.num_layers", "heads": "model.num_heads",
    "d_model": "model.d_model", "d_ff": "model.d_ff", "dropout": "model.dropout",
    "max_position": "model.max_position", "logit_scale": "model.logit_scale", "corpus": "corpus",
    "val_fraction": "val_fraction", "train_length": "train_length", "steps": "steps",
    "batch_size": "batch_size", "lr": "lr", "warmup": "warmup", "weight_decay": "weight_decay",
    "grad_clip": "grad_clip", "seed": "seed", "checkpoint_every": "checkpoint_every",
    "log_every": "log_every", "val_windows": "val_windows", "device": "device", "precision": "precision",
}


def lm_config_from_options(options: dict) -> LMConfig:
    """An LMConfig from option values (names as in LM_OPTIONS) on top of the LMConfig defaults."""
    d = LMConfig().to_dict()
    for key, value in options.items():
        if key not in LM_OPTIONS:
            raise LengenError(f"unknown option {key!r}")
        set_path(d, LM_OPTIONS[key], value)
    return LMConfig.from_dict(d)
