"""Attention-logit scaling variants (seed blog, kexue.fm/archives/8823):

  none            the usual 1/sqrt(d)
  log_n           logits x log(n)/log(m): n = current key length, m = ModelConfig.train_length
  log_n_clipped   logits x max(1, log(n)/log(m))
  log_n_position  the query at position i uses max(1, log(i+1)/log(m)) (for causal models)

m is stored in the model config, so it travels with the checkpoint."""

from __future__ import annotations

import math

import torch

from lengen.errors import LengenError

LOGIT_SCALES = ("none", "log_n", "log_n_clipped", "log_n_position")


def check_logit_scale(cfg) -> None:
    if cfg.logit_scale not in LOGIT_SCALES:
        raise LengenError(f"unknown logit_scale {cfg.logit_scale!r}; valid: {', '.join(LOGIT_SCALES)}")
    if cfg.logit_scale != "none" and (cfg.train_length is None or cfg.train_length < 2):
        raise LengenError(f"logit_scale {cfg.logit_scale!r} needs a training length >= 2")


def logit_scale_factor(cfg, pos_q: torch.Tensor, n: int):
    """None (no change), a float multiplying the softmax scale, or a per-query tensor
    [B|1, 1, Tq, 1] multiplying the queries."""
    mode = cfg.logit_scale
    if mode == "none":
        return None
    log_m = math.log(cfg.train_length)
    if mode == "log_n":
        return math.log(max(n, 1)) / log_m
    if mode == "log_n_clipped":
        return max(1.0, math.log(max(n, 1)) / log_m)
    if mode == "log_n_position":
        f = torch.log(pos_q.float().clamp(min=0) + 1.0) / log_m
        return f.clamp(min=1.0)[:, None, :, None]
    raise LengenError(f"unknown logit_scale {mode!r}")
