"""The configuration of one language-model run, saved as config.json in its run directory."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from lengen.devices import check_precision
from lengen.encodings import ENCODINGS
from lengen.errors import LengenError
from lengen.models.config import ARITH_KEY, ARITH_RUN, CHE_RUN, MLM_RUN, ModelConfig, run_config_from_dict
from lengen.training.corpus_loop import check_corpus_run_numbers
from lengen.positions import SAMPLERS


def default_lm_model() -> ModelConfig:
    """About 0.8M parameters: big enough to beat a unigram model clearly in ~10 CPU minutes."""
    return ModelConfig(num_layers=4, num_heads=4, d_model=128, d_ff=512, dropout=0.0, norm="pre",
                       causal=True, pe="rope", embed_scale=False, max_position=8192)


def check_init_record(record) -> None:
    """An LMConfig.init_from record: {"run_id": 12 hex digits, "step": int >= 1, "pe": str}."""
    ok = (isinstance(record, dict) and set(record) == {"run_id", "step", "pe"} and isinstance(record["run_id"], str)
          and isinstance(record["step"], int) and not isinstance(record["step"], bool) and record["step"] >= 1
          and isinstance(record["pe"], str))
    if not ok:
        raise LengenError(f"init_from must be {{run_id, step >= 1, pe}} (a finished run), got {record!r}")


def pe_text(model: ModelConfig) -> str:
    return f"layer-pe {','.join(model.layer_pe)}" if model.layer_pe else f"--pe {model.pe}"


@dataclass
class LMConfig:
    model: ModelConfig = field(default_factory=default_lm_model)
    corpus: str | None = None          # file, folder or glob; None = the Python standard library
    val_fraction: float = 0.05         # share of documents held out (by name hash)
    train_length: int = 256            # tokens per training window (also ModelConfig.train_tokens)
    positions: str = "standard"        # training position sampler (lengen.positions.SAMPLERS); eval: standard
    position_options: dict = field(default_factory=dict)  # e.g. target=2048 for pose
    steps: int = 1800
    batch_size: int = 16
    lr: float = 2e-3                   # peak AdamW learning rate (linear warmup, cosine decay to 10%)
    warmup: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 200
    log_every: int = 20
    val_windows: int = 128             # validation windows of train_length tokens for the final ppl
    device: str = "auto"               # auto | cpu | cuda | cuda:N (lengen.devices)
    precision: str = "fp32"            # fp32 | tf32 | bf16 (lengen.devices)
    #: DroPE's recalibration (`lengen lm train --init-from RUN_DIR`): the source run whose weights
    #: step 0 starts from, {"run_id": its config digest, "step": its checkpoint's, "pe": its encoding}
    init_from: dict | None = None

    #: what defines the checkpoint; the others (checkpointing, validation size) may change on resume.
    #: `steps` is part of it because the learning-rate schedule depends on it. `device` and
    #: `precision` are not: a run may resume on another device or in another numeric mode.
    IDENTITY = ["model", "corpus", "val_fraction", "train_length", "positions", "position_options", "steps",
                "batch_size", "lr", "warmup", "weight_decay", "grad_clip", "seed", "log_every", "init_from"]
    #: where a run executes, not what it computes: left out of a sweep run's identity hash
    RUNTIME = ["device"]
    #: fields added after LM sweeps existed, with their defaults (lengen.sweeps.spec.run_id)
    ADDED_FIELDS = {"positions": "standard", "position_options": {}, "model.layer_pe": None,
                    "model.logit_scale_options": {}, "init_from": None}

    def __post_init__(self):
        self.model.train_tokens = self.train_length  # log-n scalings and methods read it from the model

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str | None = None) -> LMConfig:
        """`where` (a run directory) prefixes the error messages."""
        return run_config_from_dict(cls, d, where, {ARITH_KEY: ARITH_RUN, "task": CHE_RUN, "mask_rate": MLM_RUN})

    def validate(self) -> None:
        ENCODINGS.get(self.model.pe)  # unknown encoding -> LengenError listing the valid ones
        SAMPLERS.get(self.positions)  # unknown sampler -> the same
        check_corpus_run_numbers(self)
        check_precision(self.precision)
        if not self.model.causal:
            raise LengenError("a language model must be causal")
        if self.init_from is not None:
            check_init_record(self.init_from)
            if self.model.pe != "none" or self.model.layer_pe:
                raise LengenError(f"--init-from drops the positional encoding (DroPE): give --pe none, not "
                                  f"{pe_text(self.model)}")
        if self.model.pe == "learned" and self.model.max_position < self.train_length:
            raise LengenError(f"max-position {self.model.max_position} < train-length {self.train_length}")
        self.model.validate()
