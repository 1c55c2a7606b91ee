"""Attention for a stack of models under torch.func.vmap (lengen.training.group).

vmap cannot see into the fused CPU kernel (a ctypes call) and torch's CPU SDPA has no batching
rule (vmap would fall back to a slow per-slice loop with a warning), so `stacked_attention` is an
autograd.Function whose vmap rule takes the model axis off and runs `lengen.kernels.attention`
once per model: the fused kernel at each model's own [B, H, Tq, Tk], a bias broadcast over the
batch kept broadcast (no [N, B, H, Tq, Tk] copy), and autograd recorded on the plain tensors.

On CUDA the caller uses torch's SDPA directly: its fused kernels (flash, memory-efficient,
cuDNN) have batching rules that fold the model axis into the batch.
"""

from __future__ import annotations

import torch

from lengen.kernels.small_attention import attention, sdpa


class _PerModelAttention(torch.autograd.Function):
    # under vmap only the `vmap` rule runs; forward/backward serve a call outside vmap
    @staticmethod
    def forward(q, k, v, bias, causal, scale):
        return attention(q, k, v, bias=bias, causal=causal, scale=scale)

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, bias, causal, scale = inputs
        ctx.save_for_backward(q, k, v, bias)
        ctx.causal, ctx.scale = causal, scale

    @staticmethod
    def backward(ctx, dout):
        # recompute: a call outside vmap is the rare case (the group always vmaps)
        q, k, v, bias = ctx.saved_tensors
        inputs = [t.detach().requires_grad_(need) if t is not None else None
                  for t, need in zip((q, k, v, bias), ctx.needs_input_grad[:4])]
        with torch.enable_grad():
            out = attention(*inputs[:3], bias=inputs[3], causal=ctx.causal, scale=ctx.scale)
        wrt = [t for t in inputs if t is not None and t.requires_grad]
        grads = iter(torch.autograd.grad(out, wrt, dout)) if wrt else iter(())
        return tuple(next(grads) if t is not None and t.requires_grad else None for t in inputs) + (None, None)

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


def sdpa_batches_models(device) -> bool:
    """Whether torch's SDPA runs a vmapped stack of models as one batch: its fused CUDA kernels
    have batching rules; its CPU kernel has none (and no gradient for a learned bias under vmap)."""
    return torch.device(device).type == "cuda"


def attention_for_stack(device):
    """The attention a vmapped stack of models runs through on `device`: SDPA where it batches
    the models (CUDA), `stacked_attention` (the fused kernel per model) elsewhere."""
    return sdpa if sdpa_batches_models(device) else stacked_attention


def stack_length_multiple(device) -> int:
    """What a stack's padded step length is rounded up to on `device`: CUDA's memory-efficient
    SDPA kernel wants the bias's row stride (the key count) a multiple of 4 and refused a vmapped
    stack's T = 10 on an H100 (2026-11-27); 8 also suits the tensor cores. The extra keys are
    padding (an -inf bias), the extra queries are never read. The CPU kernel takes any T."""
    return 8 if torch.device(device).type == "cuda" else 1
