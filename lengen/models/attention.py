"""Multi-head self-attention that delegates everything positional to the encoding's hooks.

One forward serves every model: the CHE encoder, the decoder LM with its KV cache (the cache in
the context holds the earlier tokens' keys, un-rotated), and the decoder with a training-free RoPE
method (the method in the context replaces the RoPE layers' rotation and attention). How the
attention kernel and dropout run is injected through the context's `runtime`: one model by
default (lengen.kernels.attention: a fused CPU kernel where it applies, torch's SDPA otherwise),
or one model of a stack trained together (lengen.che.stack), which this module knows nothing of.

Attention variants (ModelConfig.logit_scale, ModelConfig.key_norm) apply in training and
evaluation alike; see lengen/models/logit_scaling.py."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lengen import kernels
from lengen.kernels.heads import split_heads
from lengen.kernels.small_attention import causal_additive_mask
from lengen.models.config import ModelConfig
from lengen.models.logit_scaling import logit_scale_factor, ssmax_init


class Runtime:
    """How one forward pass runs the parts that have more than one implementation. This default
    runs one model; grouped training passes a subclass for each model of a vmapped stack
    (lengen.che.stack.MemberRuntime: padded keys, per-member dropout masks, a kernel that works
    under vmap)."""

    #: keys that log-n scaling counts (None: all of k; a 0-d tensor when k is padded)
    real_keys: torch.Tensor | None = None

    def attention(self, q, k, v, bias, causal: bool, scale: float) -> torch.Tensor:
        return kernels.attention(q, k, v, bias=bias, causal=causal, scale=scale)

    def dropout(self, drop: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return drop(x)

    def check_positions(self, pe, pos: torch.Tensor) -> None:
        pe.check_positions(pos)


ONE_MODEL = Runtime()


@dataclass
class AttentionContext:
    """What every layer of one forward pass shares."""

    pe_state: Any
    pos_q: torch.Tensor            # [B|1, Tq]
    pos_k: torch.Tensor            # [B|1, Tk]: every key, the cached ones included
    causal: bool
    cache: Any = None              # earlier tokens' keys and values, un-rotated (lengen.extrapolation.cache)
    method: Any = None             # a training-free RoPE method for the RoPE layers (lengen.extrapolation)
    seq_len: int | None = None     # the length it picks frequencies for (None: it reads pos_k, per layer)
    runtime: Runtime = field(default=ONE_MODEL)


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, pe):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        self.pe = [pe]  # a list so the shared encoding is not registered once per layer
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        if cfg.logit_scale == "ssmax":  # SSMax's learnable s, one per head (lengen.models.logit_scaling)
            self.ssmax_s = nn.Parameter(torch.full((cfg.num_heads,), ssmax_init(cfg)))

    def project(self, x: torch.Tensor):
        return split_heads(self.qkv(x), self.cfg.num_heads)  # each [B, H, T, hd]

    def scaled_qk(self, q, k, pos_q, transform=None, keys=None):
        """(q, k, scale) with the model's attention variants applied: key norm (unit keys and no
        1/sqrt(d), Su 2023), then `transform(q, k)` (an encoding's q/k hook), then logit scaling
        (a factor on the scale, or per query on q) for `keys` keys (default: all of k; a 0-d
        tensor when k is padded). The one implementation, shared by `attend`, `attention_probs`
        and the RoPE-method path."""
        cfg = self.cfg
        scale = 1.0 / math.sqrt(cfg.head_dim)
        if cfg.key_norm:
            k = F.normalize(k, dim=-1)
            scale = 1.0
        if transform is not None:
            q, k = transform(q, k)
        factor = logit_scale_factor(cfg, pos_q, k.shape[-2] if keys is None else keys, self.layer,
                                    getattr(self, "ssmax_s", None))
        if factor is not None:
            if isinstance(factor, torch.Tensor):
                q = q * factor.to(q.dtype)  # per-query factor, [B|1, 1, Tq, 1]
            else:
                scale *= factor
        return q, k, scale

    def _logit_inputs(self, q, k, ctx: AttentionContext):
        """(q, k, scale, bias) as the softmax sees them: logits = scale * q.k^T + bias, then the
        causal mask; `attend` and `attention_probs` both go through it. The bias is the encoding's
        position bias plus its q/k-dependent one (`qk_bias`, CoPE), which reads q, k after every
        other step."""
        pe = self.pe[0]
        q, k, scale = self.scaled_qk(q, k, ctx.pos_q, lambda q, k: pe.transform_qk(self.layer, ctx.pe_state, q, k),
                                     keys=ctx.runtime.real_keys)
        bias = pe.bias(self.layer, ctx.pe_state)
        if bias is not None:
            bias = bias.to(q.dtype)
        content = pe.qk_bias(self.layer, ctx.pe_state, q, k, scale, ctx.causal)
        if content is not None:
            content = content.to(q.dtype)
            bias = content if bias is None else bias + content
        return q, k, scale, bias

    def attend(self, q, k, v, ctx: AttentionContext) -> torch.Tensor:
        q, k, scale, bias = self._logit_inputs(q, k, ctx)
        return ctx.runtime.attention(q, k, v, bias, ctx.causal, scale)

    def attend_method(self, q, k, v, ctx: AttentionContext) -> torch.Tensor:
        """Attention through a training-free RoPE method: it gets q and k un-rotated (after the
        model's trained key norm and logit scaling), rotates or remaps them itself, applies its
        log-n query scale and is causal by position. The cache holds un-rotated keys, so every
        decoding step sees exactly the logits of a full forward over the same tokens."""
        q, k, scale = self.scaled_qk(q, k, ctx.pos_q)
        return ctx.method.for_layer(self.layer).attend(q, k, v, ctx.pos_q, ctx.pos_k, scale, seq_len=ctx.seq_len)

    def attention_probs(self, q, k, ctx: AttentionContext) -> torch.Tensor:
        """The attention probabilities [B, H, Tq, Tk] that `attend` applies to v, in float32, for
        q, k from `project` (written out: the fused kernel does not return them). For inspection,
        not for training: it materialises the full Tq x Tk matrix."""
        q, k, scale, bias = self._logit_inputs(q, k, ctx)
        logits = (q @ k.transpose(-1, -2)).float() * scale
        if bias is not None:
            logits = logits + bias.float()
        if ctx.causal:
            logits = logits + causal_additive_mask(logits.shape[-2], logits.shape[-1], logits.device, logits.dtype)
        return torch.softmax(logits, dim=-1)

    def forward(self, x: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.project(x)
        if ctx.cache is not None:  # prepend the earlier tokens' keys and values
            k, v, _ = ctx.cache.update(self.layer, k, v, ctx.pos_q)
        if ctx.method is not None and self.pe[0].for_layer(self.layer).rotary:
            out = self.attend_method(q, k, v, ctx)  # a NoPE layer of a pattern keeps its own hooks
        else:
            out = self.attend(q, k, v, ctx)
        return self.out(out.transpose(1, 2).reshape(B, T, D))
