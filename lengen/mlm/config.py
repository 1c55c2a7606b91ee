"""The configuration of one masked-LM run, saved as config.json in its run directory. Defaults
follow Su's protocol (docs/mlm.md) (4 x 128 pre-LN encoder with RoPE, training length 64, batch 32,
lr 1e-3, 500 warmup steps, 10,000 steps, 15% BERT masking)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from lengen.devices import check_precision
from lengen.encodings import ENCODINGS
from lengen.errors import LengenError
from lengen.training.corpus_loop import check_corpus_run_numbers
from lengen.models.config import ARITH_KEY, ARITH_RUN, CHE_RUN, LM_RUN, ModelConfig, run_config_from_dict
from lengen.positions import SAMPLERS


def default_mlm_model() -> ModelConfig:
    """About 0.8M non-embedding parameters (the LM default's size), bidirectional."""
    return ModelConfig(num_layers=4, num_heads=4, d_model=128, d_ff=512, dropout=0.1, norm="pre",
                       causal=False, pe="rope", embed_scale=False, max_position=2048)


@dataclass
class MLMConfig:
    model: ModelConfig = field(default_factory=default_mlm_model)
    corpus: str | None = None          # file, folder or glob; None = the Python standard library
    val_fraction: float = 0.05         # share of documents held out (by name hash)
    train_length: int = 64             # tokens per training window (also ModelConfig.train_tokens)
    positions: str = "standard"        # training position sampler (lengen.positions.SAMPLERS)
    position_options: dict = field(default_factory=dict)  # e.g. distribution=exponential
    mask_rate: float = 0.15            # share of positions chosen per window (then 80/10/10)
    steps: int = 10000
    batch_size: int = 32
    lr: float = 1e-3                   # peak AdamW learning rate (linear warmup, cosine decay to 10%)
    warmup: int = 500
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 500
    log_every: int = 50
    val_windows: int = 128             # validation windows of train_length tokens for eval.json
    device: str = "auto"               # auto | cpu | cuda | cuda:N (lengen.devices)
    precision: str = "fp32"            # fp32 | tf32 | bf16 (lengen.devices)

    #: what defines the checkpoint (as LMConfig.IDENTITY, plus the positions and the masking)
    IDENTITY = ["model", "corpus", "val_fraction", "train_length", "positions", "position_options",
                "mask_rate", "steps", "batch_size", "lr", "warmup", "weight_decay", "grad_clip", "seed",
                "log_every"]
    #: where a run executes, not what it computes
    RUNTIME = ["device"]
    #: fields added after MLM sweeps existed, with their defaults (lengen.sweeps.spec.run_id)
    ADDED_FIELDS = {"model.layer_pe": None, "model.logit_scale_options": {}}

    def __post_init__(self):
        self.model.train_tokens = self.train_length  # m of log-n scaling

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str | None = None) -> MLMConfig:
        """`where` (a run directory) prefixes the error messages."""
        cfg = run_config_from_dict(cls, d, where, {ARITH_KEY: ARITH_RUN, "task": CHE_RUN, "init_from": LM_RUN},
                                   " (not a `lengen mlm` run?)")
        if cfg.model.causal:   # a decoder LM run has every key an MLM run has: its causal model tells
            raise LengenError((f"{where}: " if where else "") + LM_RUN)
        return cfg

    def validate(self) -> None:
        ENCODINGS.get(self.model.pe)      # unknown encoding -> LengenError listing the valid ones
        SAMPLERS.get(self.positions)      # unknown sampler -> the same
        check_corpus_run_numbers(self)
        if not 0.0 < self.mask_rate < 1.0:
            raise LengenError(f"mask-rate must be in (0, 1), got {self.mask_rate}")
        check_precision(self.precision)
        if self.model.causal:
            raise LengenError("a masked LM is bidirectional: causal must be False")
        if self.model.logit_scale in ("log_n", "log_n_clipped", "log_n_position"):
            raise LengenError("log-n scaling is a test-time switch for a masked LM (every training window has "
                              "train_length tokens, where the factor is 1): leave logit_scale at 'none' and "
                              "use `lengen mlm eval --log-n on`")
        if self.model.architecture != "transformer":
            raise LengenError(f"a masked LM is a Transformer, not {self.model.architecture!r}")
        self.model.validate()
