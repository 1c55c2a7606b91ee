"""Splitting the fused q/k/v projection into heads with a cheaper backward.

Autograd's own backward of view/permute/unbind stacks the three gradients and then copies them
again to undo the permute; `split_heads` writes each straight into its place in one buffer. Its
vmap rule (a stack of models, lengen.che.stack) folds the model axis into the batch."""

from __future__ import annotations

import torch


def repeat_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, Hk, T, d] -> [B, heads, T, d] for grouped-query attention (Hk divides heads)."""
    hk = x.shape[1]
    return x if hk == heads else x.repeat_interleave(heads // hk, dim=1)


def head_views(qkv: torch.Tensor, heads: int):
    B, T, _ = qkv.shape
    return qkv.view(B, T, 3, heads, -1).permute(2, 0, 3, 1, 4).unbind(0)


class _SplitHeads(torch.autograd.Function):
    """q, k, v [B, H, T, hd] as views of the fused projection [B, T, 3*H*hd]."""

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
    # under vmap a tensor reports requires_grad False whatever its physical tensor does, so the
    # Function (and its vmap rule) runs whenever autograd records; off it, views cost nothing
    if torch.is_grad_enabled():
        return _SplitHeads.apply(qkv, heads)
    return head_views(qkv, heads)
