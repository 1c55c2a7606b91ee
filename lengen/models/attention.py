"""Multi-head self-attention that delegates everything positional to the encoding's hooks and runs
through lengen.kernels.attention: a fused CPU kernel for small head dims where it applies, torch's
scaled_dot_product_attention otherwise (an additive bias goes in as attn_mask).

Attention variants (ModelConfig.logit_scale, ModelConfig.key_norm) apply in training and
evaluation alike; see lengen/models/logit_scaling.py.

The same modules serve one model and a stack of models trained together (lengen.che.group
runs this forward under torch.func.vmap over stacked weights): a stack member's forward carries a
`StackMember` in its context, with the key padding of its sequence, its real key count and the
attention kernel that works under vmap."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lengen import kernels
from lengen.kernels.small_attention import causal_additive_mask
from lengen.models.config import ModelConfig
from lengen.models.logit_scaling import logit_scale_factor, ssmax_init


@dataclass
class StackMember:
    """One model of a stack trained together (lengen.che.group), seen from inside vmap. Its
    sequence is padded at the end to the stack's longest: padded keys get -inf (no real query sees
    them, and they get no gradient) and log-n scaling counts the real keys. `dropout_keep` holds
    the member's dropout masks, drawn outside vmap from its own stream (lengen.models.dropout)."""

    key_bias: torch.Tensor                # [Tk]: 0 for a real key, -inf for padding
    real_keys: torch.Tensor               # 0-d: how many keys are real
    attention: Callable                   # lengen.kernels.model_stack.stacked_attention or sdpa
    #: bool keep masks, one per dropout call of the forward in call order (None: no dropout),
    #: and the 0-d factor 1 / (1 - p) that rescales what is kept
    dropout_keep: list[torch.Tensor] | None = None
    dropout_scale: torch.Tensor | None = None

    def dropout(self, x: torch.Tensor) -> torch.Tensor:
        """x with this member's next dropout mask applied (Dropout.forward's stack path)."""
        if self.dropout_keep is None:
            return x
        if not self.dropout_keep:
            raise RuntimeError("the forward called dropout more often than the stack planned masks for")
        keep = self.dropout_keep.pop(0)
        if keep.shape != x.shape:
            raise RuntimeError(f"dropout mask {tuple(keep.shape)} drawn for an input {tuple(x.shape)}: "
                               "the stack plans one [B, T, d_model] mask per dropout call")
        return x * (keep.to(x.dtype) * self.dropout_scale)


@dataclass
class AttentionContext:
    """What every layer of one forward pass shares."""

    pe_state: Any
    pos_q: torch.Tensor            # [B|1, Tq]
    pos_k: torch.Tensor            # [B|1, Tk]
    causal: bool
    stack: StackMember | None = None  # set when this forward is one model of a vmapped stack


def head_views(qkv: torch.Tensor, heads: int):
    B, T, _ = qkv.shape
    return qkv.view(B, T, 3, heads, -1).permute(2, 0, 3, 1, 4).unbind(0)


class _SplitHeads(torch.autograd.Function):
    """q, k, v [B, H, T, hd] as views of the fused projection [B, T, 3*H*hd]. Autograd's own
    backward of view/permute/unbind stacks the three gradients and then copies them again to
    undo the permute; this one writes each straight into its place in one buffer."""

    @staticmethod
    def forward(qkv, heads):
        return head_views(qkv, heads)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, gq, gk, gv):
        B, H, T, hd = gq.shape
        grad = torch.empty(B, T, 3, H, hd, dtype=gq.dtype, device=gq.device)
        for i, g in enumerate((gq, gk, gv)):
            grad[:, :, i].copy_(g.transpose(1, 2))
        return grad.view(B, T, 3 * H * hd), None

    @staticmethod
    def vmap(info, in_dims, qkv, heads):
        # a stack of models [N, B, T, C]: the same split on [N*B, T, C], this Function's backward included
        x = qkv.movedim(in_dims[0], 0)
        N, B, T, C = x.shape
        q, k, v = _SplitHeads.apply(x.reshape(N * B, T, C), heads)
        return tuple(t.view(N, B, *t.shape[1:]) for t in (q, k, v)), (0, 0, 0)


def split_heads(qkv: torch.Tensor, heads: int):
    """(q, k, v), each [B, H, T, hd], from the fused projection output [B, T, 3*H*hd]."""
    if torch.is_grad_enabled() and qkv.requires_grad:
        return _SplitHeads.apply(qkv, heads)
    return head_views(qkv, heads)


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
        tensor for a padded stack member). The one implementation, shared by `attend`,
        `attention_probs` and the decoder's RoPE-method path (lengen.lm.attention)."""
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
        other step. A stack member's padded keys are in the bias (-inf)."""
        pe, stack = self.pe[0], ctx.stack
        q, k, scale = self.scaled_qk(q, k, ctx.pos_q, lambda q, k: pe.transform_qk(self.layer, ctx.pe_state, q, k),
                                     keys=None if stack is None else stack.real_keys)
        bias = pe.bias(self.layer, ctx.pe_state)
        if bias is not None:
            bias = bias.to(q.dtype)
        content = pe.qk_bias(self.layer, ctx.pe_state, q, k, scale, ctx.causal)
        if content is not None:
            content = content.to(q.dtype)
            bias = content if bias is None else bias + content
        if stack is not None:
            padding = stack.key_bias.to(q.dtype)[None, None, None, :]  # [1, 1, 1, Tk]
            bias = padding if bias is None else bias + padding
        return q, k, scale, bias

    def attend(self, q, k, v, ctx: AttentionContext) -> torch.Tensor:
        q, k, scale, bias = self._logit_inputs(q, k, ctx)
        # the fused small-head-dim CPU kernel where it applies, torch SDPA otherwise (lengen.kernels);
        # a stack member: the kernel that works under vmap (lengen.kernels.model_stack)
        attention = kernels.attention if ctx.stack is None else ctx.stack.attention
        return attention(q, k, v, bias=bias, causal=ctx.causal, scale=scale)

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
        out = self.attend(q, k, v, ctx)
        return self.out(out.transpose(1, 2).reshape(B, T, D))
