"""Attention-logit scaling variants ("log n scaled attention", Su, kexue.fm/archives/8823 and 9444):

  none            the usual q.k / sqrt(d)
  log_n           q.k / sqrt(d) * log(n) / log(m)          (= log_m n, the seed's formula)
  log_n_clipped   q.k / sqrt(d) * max(1, log(n) / log(m))  (never sharper than trained below m)
  log_n_position  per query: n = the number of keys that query attends to, clipped as above

n is the number of keys attended to and m = ModelConfig.train_tokens, the training sequence length
(stored in the model config, so it travels with the checkpoint). The scale is exactly 1 at n = m.
For a causal model the query at index t of Tk keys attends to t + 1 of them (counting tokens, not
position values: with randomized positions the two differ, and the entropy argument behind log n
is about how many tokens share the softmax). A bidirectional query sees every key, so there
log_n_position equals log_n_clipped.

The factor multiplies q.k only; additive position biases (ALiBi, T5, FIRE, ...) are not scaled.
With key_norm the factor multiplies q.k/||k|| in the same way.
"""

from __future__ import annotations

import math

import torch

from lengen.errors import LengenError

LOGIT_SCALES = ("none", "log_n", "log_n_clipped", "log_n_position")


def check_logit_scale(cfg) -> None:
    if cfg.logit_scale not in LOGIT_SCALES:
        raise LengenError(f"unknown logit_scale {cfg.logit_scale!r}; valid: {', '.join(LOGIT_SCALES)}")
    if cfg.logit_scale != "none" and (cfg.train_tokens is None or cfg.train_tokens < 2):
        raise LengenError(f"logit_scale {cfg.logit_scale!r} needs a training length >= 2")


def log_ratio(n, m: int):
    """log(n) / log(m), for a number or a tensor of key counts n >= 1."""
    if isinstance(n, torch.Tensor):
        return torch.log(n.float().clamp(min=1.0)) / math.log(m)
    return math.log(max(n, 1)) / math.log(m)


def keys_per_query(tq: int, tk: int, causal: bool, device=None) -> torch.Tensor:
    """How many keys each of the tq queries attends to: [tq]. The queries are the last tq of the
    tk positions (as in the causal mask and in incremental decoding)."""
    if not causal:
        return torch.full((tq,), float(tk), device=device)
    return torch.arange(tk - tq + 1, tk + 1, dtype=torch.float32, device=device)


def logit_scale_factor(cfg, pos_q: torch.Tensor, n):
    """None (no change), a float multiplying the softmax scale, or a tensor multiplying the
    queries (per query [1, 1, Tq, 1], or 0-d). `pos_q` [B|1, Tq] gives Tq and the device; `n` is
    the number of keys: an int, or a 0-d tensor counting the real keys of a sequence padded at the
    end (a model of a stack trained together: the padding follows every real key, so a causal
    query t still sees t + 1 keys)."""
    mode = cfg.logit_scale
    if mode == "none":
        return None
    m = cfg.train_tokens
    counted = isinstance(n, torch.Tensor)
    if mode == "log_n_position" and (cfg.causal or not counted):
        tk = pos_q.shape[-1] if counted else n  # padded: the stack's queries are all its keys
        counts = keys_per_query(pos_q.shape[-1], tk, cfg.causal, pos_q.device)
        return log_ratio(counts, m).clamp(min=1.0)[None, None, :, None]
    ratio = log_ratio(n, m)
    if mode == "log_n":
        return ratio
    if mode in ("log_n_clipped", "log_n_position"):  # a bidirectional query sees every key
        return ratio.clamp(min=1.0) if counted else max(1.0, ratio)
    raise LengenError(f"unknown logit_scale {mode!r}")
