"""Attention for a stack of models under torch.func.vmap (lengen.che.group).

vmap cannot see into the fused CPU kernel (a ctypes call) and torch's CPU SDPA has no batching
rule (vmap would fall back to a slow per-slice loop with a warning), so `stacked_attention` is an
autograd.Function whose vmap rule takes the model axis off and runs `lengen.kernels.attention`
once per model: the fused kernel at each model's own [B, H, Tq, Tk], a bias broadcast over the
batch kept broadcast (no [N, B, H, Tq, Tk] copy), and autograd recorded on the plain tensors.

On CUDA `folded_attention` runs torch's SDPA once for the whole stack, outside vmap: the model
axis folded into the batch ([N, B, H, T, D] -> [N*B, H, T, D], a view of the q/k/v projection)
when the bias is the key padding alone, into the heads ([B, N*H, T, D], copies of q, k, v) when an
encoding's bias over heads or queries must stay broadcast over each model's batch. SDPA's own batching rule (the model
axis into the batch) failed in the memory-efficient backward on an H100 ("LSE is not correctly
aligned (strideH)", torch 2.11, 2026-11-27) and would copy such a bias per batch row.
"""

from __future__ import annotations

import torch

from lengen.kernels.small_attention import attention, sdpa


class _StackAttention(torch.autograd.Function):
    """What the stack attentions share: under vmap only a subclass's `vmap` rule runs; forward and
    backward (through `kernel`) serve a call outside vmap, the rare case."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, bias, causal, scale = inputs
        ctx.save_for_backward(q, k, v, bias)
        ctx.causal, ctx.scale = causal, scale


def _recomputed_grads(kernel, ctx, dout):
    """The gradients of `kernel` outside vmap, by recomputing the call under autograd."""
    q, k, v, bias = ctx.saved_tensors
    inputs = [t.detach().requires_grad_(need) if t is not None else None
              for t, need in zip((q, k, v, bias), ctx.needs_input_grad[:4])]
    with torch.enable_grad():
        out = kernel(*inputs[:3], bias=inputs[3], causal=ctx.causal, scale=ctx.scale)
    wrt = [t for t in inputs if t is not None and t.requires_grad]
    grads = iter(torch.autograd.grad(out, wrt, dout)) if wrt else iter(())
    return tuple(next(grads) if t is not None and t.requires_grad else None for t in inputs) + (None, None)


class _PerModelAttention(_StackAttention):
    @staticmethod
    def forward(q, k, v, bias, causal, scale):
        return attention(q, k, v, bias=bias, causal=causal, scale=scale)

    @staticmethod
    def backward(ctx, dout):
        return _recomputed_grads(attention, ctx, dout)

    @staticmethod
    def vmap(info, in_dims, q, k, v, bias, causal, scale):
        n = info.batch_size

        def per_model(t, dim):
            # unbind, not select per model: select's backward writes each gradient into a zero
            # tensor of the whole stack (N^2 memory traffic); unbind's stacks them once
            if t is None:
                return [None] * n
            return [t] * n if dim is None else t.unbind(dim)

        outs = [attention(qi, ki, vi, bias=bi, causal=causal, scale=scale)
                for qi, ki, vi, bi in zip(per_model(q, in_dims[0]), per_model(k, in_dims[1]),
                                          per_model(v, in_dims[2]), per_model(bias, in_dims[3]))]
        return torch.stack(outs), 0


def stacked_attention(q, k, v, bias=None, causal=False, scale=None):
    """`lengen.kernels.attention(q, k, v, bias, causal, scale)` for one model of a vmapped
    stack: the fused kernel per model on the CPU. Same semantics as `attention` (q [B,H,Tq,D],
    bias broadcastable to [B,H,Tq,Tk], `causal`: the queries are the last Tq keys)."""
    if scale is None:
        scale = q.shape[-1] ** -0.5
    return _PerModelAttention.apply(q, k, v, bias, bool(causal), float(scale))


def as_stack(t, dim, n, ndim=4):
    """The physical tensor of a vmapped argument as [N, *logical], the logical part padded with
    leading 1s to `ndim` dims (a bias may be given as [Tk] or [1, 1, 1, Tk])."""
    t = t.unsqueeze(0).expand(n, *t.shape) if dim is None else t.movedim(dim, 0)
    return t.reshape(n, *(1,) * (ndim + 1 - t.dim()), *t.shape[1:])


class _FoldedAttention(_StackAttention):
    @staticmethod
    def forward(q, k, v, bias, causal, scale):
        return sdpa(q, k, v, bias=bias, causal=causal, scale=scale)

    @staticmethod
    def backward(ctx, dout):
        return _recomputed_grads(sdpa, ctx, dout)

    @staticmethod
    def vmap(info, in_dims, q, k, v, bias, causal, scale):
        n = info.batch_size
        q, k, v = (as_stack(t, d, n) for t, d in zip((q, k, v), in_dims[:3]))  # [N, B, H, T, D]
        N, B, H, Tq, D = q.shape
        if bias is not None:
            bias = as_stack(bias, in_dims[3], n)  # [N, 1|B, 1|H, 1|Tq, Tk]
        if bias is None or bias.shape[2] == bias.shape[3] == 1:
            # no bias or keys alone (the padding mask): the models folded into the batch, which
            # for q, k, v split from one projection is a view (no copies either way); the key
            # bias made real per batch row is [N*B, 1, 1, Tk], small
            if bias is not None:
                bias = bias.expand(N, B, 1, 1, bias.shape[-1]).reshape(N * B, 1, 1, -1)
            out = sdpa(*(t.reshape(N * B, *t.shape[2:]) for t in (q, k, v)), bias=bias, causal=causal, scale=scale)
            return out.view(N, B, *out.shape[1:]), 0

        def to_heads(t):  # [N, B, H, T, D] -> [B, N*H, T, D]
            return t.transpose(0, 1).reshape(t.shape[1], N * H, *t.shape[3:])

        # a bias over heads or queries (an encoding's), shared by a model's batch: the models
        # folded into the heads, so that the bias stays broadcast over the batch (folded into
        # the batch, it would be copied per batch row)
        bias = bias.expand(N, bias.shape[1], H, *bias.shape[3:])
        bias = bias.transpose(0, 1).reshape(bias.shape[1], N * H, *bias.shape[3:])
        out = sdpa(to_heads(q), to_heads(k), to_heads(v), bias=bias, causal=causal, scale=scale)
        return out.reshape(B, N, H, Tq, -1).transpose(0, 1), 0


def folded_attention(q, k, v, bias=None, causal=False, scale=None):
    """torch's SDPA for one model of a vmapped stack, run once for all models with the model axis
    folded into the heads. Same semantics as `lengen.kernels.attention`."""
    if scale is None:
        scale = q.shape[-1] ** -0.5
    return _FoldedAttention.apply(q, k, v, bias, bool(causal), float(scale))


def sdpa_batches_models(device) -> bool:
    """Whether one SDPA call runs a vmapped stack of models (`folded_attention`): on CUDA, where
    its fused kernels take the whole stack at once; the CPU runs the fused kernel per model."""
    return torch.device(device).type == "cuda"


def attention_for_stack(device):
    """The attention a vmapped stack of models runs through on `device`: `folded_attention` (one
    SDPA call for the stack) on CUDA, `stacked_attention` (the fused kernel per model) elsewhere."""
    return folded_attention if sdpa_batches_models(device) else stacked_attention


def stack_length_multiple(device) -> int:
    """What a stack's padded step length is rounded up to on `device`: CUDA's memory-efficient
    SDPA kernel wants the bias's row stride (the key count) a multiple of 4 and refused a vmapped
    stack's T = 10 on an H100 (2026-11-27); 8 also suits the tensor cores. The extra keys are
    padding (an -inf bias), the extra queries are never read. The CPU kernel takes any T."""
    return 8 if torch.device(device).type == "cuda" else 1
