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

Two more, from 2025 models (options in ModelConfig.logit_scale_options, `--logit-scale-option K=V`):

  ssmax               Scalable-Softmax (Nakanishi 2025, arXiv 2501.19399, eq. 2-3):
                      SSMax(z)_j = n^(s z_j) / sum_j' n^(s z_j') = softmax_j((s log n) z_j), so the
                      logits q.k / sqrt(d) are multiplied by s_h log n (on top of 1/sqrt(d)), with s
                      a learnable scalar per layer and head (`SelfAttention.ssmax_s`, [H]).
                      Option s_init: the initial s, default 1 / log m, which makes the factor
                      exactly 1 at n = m (the model starts at the usual softmax temperature at
                      the training length; lengen's log_n at init). The paper's Fig. 1
                      illustrates s = 0.43; its initial value is not confirmed from the paper.
  llama4_temperature  Llama 4's attention temperature tuning (HF modeling_llama4.py,
                      Llama4TextAttention, `attn_temperature_tuning`): on NoPE layers only (the
                      layers whose encoding is `none`, ModelConfig.layer_encoding), the query at
                      absolute index c is multiplied by 1 + attn_scale ln(1 + floor((c + 1) /
                      floor_scale)); 1/sqrt(d) unchanged. Here c + 1 is the number of keys the
                      query sees (causal, KV cache included); a bidirectional query sees all n
                      keys and gets 1 + attn_scale ln(1 + floor(n / floor_scale)).
                      Options: attn_scale (0.1, Llama 4's) and floor_scale, default ceil(m / 8):
                      Llama 4's 8192 would keep the factor at exactly 1 for every length lengen
                      trains and most it evaluates; with m / 8 it steps up within the training
                      lengths (1 + 0.1 ln 9 = 1.22 at n = m), so the model trains with it.

One more, from DroPE (Gelberg et al. 2025, arXiv 2512.12167, App. C.2), for models without
positional encoding:

  drope               q.k / sqrt(d) * beta, beta = 1 + c ln(n / m) for n > m, 1 for n <= m, with n
                      the number of keys (as log_n: the whole sequence, one factor per length).
                      Option c (>= 0): DroPE fits it per model on held-out text at the target
                      length (`lengen lm eval --drope-scale fit`, lengen.lm.evaluate; the paper's
                      0.103 and 0.412). Default 1 / ln m, where it equals log_n_clipped (ln n / ln m
                      = 1 + ln(n / m) / ln m); c = 0 is the plain attention.

For ssmax and llama4_temperature, n counts keys (the query at index t of a causal model sees t + 1), never position values,
as for log_n_position.

The factor multiplies q.k only; additive position biases (ALiBi, T5, FIRE, ...) are not scaled.
With key_norm the factor multiplies q.k/||k|| in the same way.
"""

from __future__ import annotations

import math

import torch

from lengen.errors import LengenError

LOGIT_SCALES = ("none", "log_n", "log_n_clipped", "log_n_position", "ssmax", "llama4_temperature", "drope")
#: the options a mode takes (any other mode takes none), and the lower bound of each value
LOGIT_SCALE_OPTIONS = {"ssmax": {"s_init": 0.0}, "llama4_temperature": {"floor_scale": 0.0, "attn_scale": None},
                       "drope": {"c": None}}
LLAMA4_ATTN_SCALE = 0.1  # HF Llama4TextConfig.attn_scale


def check_logit_scale(cfg) -> None:
    mode, options = cfg.logit_scale, dict(cfg.logit_scale_options or {})
    if mode not in LOGIT_SCALES:
        raise LengenError(f"unknown logit_scale {mode!r}; valid: {', '.join(LOGIT_SCALES)}")
    valid = LOGIT_SCALE_OPTIONS.get(mode, {})
    for key, value in options.items():
        if key not in valid:
            takes = f"takes {', '.join(valid)}" if valid else "takes no options"
            raise LengenError(f"logit-scale-option {key!r} does not apply: logit_scale {mode!r} {takes}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise LengenError(f"logit-scale-option {key} must be a number, got {value!r}")
        if valid[key] is not None and not value > valid[key]:
            raise LengenError(f"logit-scale-option {key} must be > {valid[key]:g}, got {value}")
        if valid[key] is None and value < 0:
            raise LengenError(f"logit-scale-option {key} must be >= 0, got {value}")
    derived = {"ssmax": "s_init", "llama4_temperature": "floor_scale", "drope": "c"}
    if mode != "none" and derived.get(mode) not in options and (cfg.train_tokens is None or cfg.train_tokens < 2):
        raise LengenError(f"logit_scale {mode!r} needs a training length >= 2")
    if mode == "llama4_temperature" and not any(cfg.layer_encoding(i) == "none" for i in range(cfg.num_layers)):
        raise LengenError("logit_scale 'llama4_temperature' scales NoPE layers only and this model has none: "
                          "give layers encoding none (e.g. --layer-pe rope,rope,rope,none) or --pe none")


def ssmax_init(cfg) -> float:
    """The initial SSMax s: option s_init, else 1 / log m (factor 1 at the training length)."""
    s = cfg.logit_scale_options.get("s_init")
    return float(s) if s is not None else 1.0 / math.log(cfg.train_tokens)


def llama4_floor_scale(cfg) -> float:
    """Llama 4's floor_scale: the option, else ceil(m / 8) (see the module docstring)."""
    f = cfg.logit_scale_options.get("floor_scale")
    return float(f) if f is not None else float(max(1, math.ceil(cfg.train_tokens / 8)))


def visible_keys(pos_q: torch.Tensor, n, causal: bool):
    """How many keys each query sees, float32: [Tq] for a causal model (the queries are the last
    Tq of the keys: t + 1 for the query at index t), else n for every query (a 0-d tensor for a
    padded stack member's real keys, a float otherwise). `n` as in logit_scale_factor."""
    counted = isinstance(n, torch.Tensor)
    if causal:
        tk = pos_q.shape[-1] if counted else n  # padded: the stack's queries are all its keys
        return keys_per_query(pos_q.shape[-1], tk, True, pos_q.device)
    return n.float() if counted else float(n)


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


def logit_scale_factor(cfg, pos_q: torch.Tensor, n, layer: int = 0, ssmax_s: torch.Tensor | None = None):
    """None (no change), a float multiplying the softmax scale, or a tensor multiplying the
    queries (per query [1, 1, Tq, 1], per head and query [1, H, Tq|1, 1], or 0-d). `pos_q`
    [B|1, Tq] gives Tq and the device; `n` is the number of keys: an int, or a 0-d tensor counting
    the real keys of a sequence padded at the end (a model of a stack trained together: the padding
    follows every real key, so a causal query t still sees t + 1 keys). `layer`: the block (for
    llama4_temperature, which scales NoPE layers only); `ssmax_s`: that layer's SSMax s [H]."""
    mode = cfg.logit_scale
    if mode == "none":
        return None
    if mode == "ssmax":
        # eq. 3: softmax((s log n) z); s per head [H] -> [1, H, 1, 1], log n per query [Tq] -> [1, 1, Tq, 1]
        keys = visible_keys(pos_q, n, cfg.causal)
        if not isinstance(keys, torch.Tensor):
            keys = torch.tensor(keys, dtype=torch.float32, device=pos_q.device)
        log_n = torch.log(keys)
        return ssmax_s.float().view(1, -1, 1, 1) * (log_n.view(1, 1, -1, 1) if log_n.dim() else log_n)
    if mode == "llama4_temperature":
        if cfg.layer_encoding(layer) != "none":
            return None  # RoPE (and every other encoding's) layers keep their temperature
        attn_scale = float(cfg.logit_scale_options.get("attn_scale", LLAMA4_ATTN_SCALE))
        keys = visible_keys(pos_q, n, cfg.causal)  # c + 1 in Llama 4's formula
        if isinstance(keys, float):
            return 1.0 + attn_scale * math.log1p(math.floor(keys / llama4_floor_scale(cfg)))
        # 1 + attn_scale ln(1 + floor((c + 1) / floor_scale))
        f = 1.0 + attn_scale * torch.log1p(torch.floor(keys / llama4_floor_scale(cfg)))
        return f.view(1, 1, -1, 1) if f.dim() else f
    m = cfg.train_tokens
    counted = isinstance(n, torch.Tensor)
    if mode == "drope":  # 1 + c ln(n / m) past the training length, 1 up to it
        c = float(cfg.logit_scale_options.get("c", 1.0 / math.log(m)))
        if counted:
            return 1.0 + c * torch.log(n.float().clamp(min=1.0) / m).clamp(min=0.0)
        return 1.0 + c * max(0.0, math.log(max(n, 1) / m))
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
