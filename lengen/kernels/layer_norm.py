"""Layer norm with a cheaper forward for a stack of models (lengen.che.stack).

Under vmap with a weight and bias per model, torch's own rule normalises, then multiplies by the
weight and adds the bias: three passes over the activations. `layer_norm`'s vmap rule normalises
and applies both in one `addcmul`: two. One model alone runs torch's kernels (native_layer_norm and
its backward), so its values and gradients are exactly nn.LayerNorm's."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _LayerNorm(torch.autograd.Function):
    """(out, mean, rstd) of native_layer_norm over the last dim; mean and rstd for the backward."""

    @staticmethod
    def forward(x, weight, bias, eps):
        return torch.native_layer_norm(x, (x.shape[-1],), weight, bias, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias, _ = inputs
        _, mean, rstd = output
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.mark_non_differentiable(mean, rstd)

    @staticmethod
    def backward(ctx, grad, _mean, _rstd):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        grads = torch.ops.aten.native_layer_norm_backward(grad, x, (x.shape[-1],), mean, rstd, weight, bias,
                                                          list(ctx.needs_input_grad[:3]))
        return (*grads, None)

    @staticmethod
    def vmap(info, in_dims, x, weight, bias, eps):
        # the stack's physical tensors: x [N, ..., d], the weight and bias [N, d] (or shared [d])
        n = info.batch_size
        x = x.expand(n, *x.shape) if in_dims[0] is None else x.movedim(in_dims[0], 0)

        def per_model(t, dim):  # [N, 1.., d], broadcast against x
            t = t.expand(n, *t.shape) if dim is None else t.movedim(dim, 0)
            return t.view(n, *(1,) * (x.dim() - 2), t.shape[-1])

        normed, mean, rstd = torch.native_layer_norm(x, (x.shape[-1],), None, None, eps)
        out = _Affine.apply(normed, per_model(weight, in_dims[1]), per_model(bias, in_dims[2]))
        return (out, mean, rstd), (0, 0, 0)


class _Affine(torch.autograd.Function):
    """normed * weight + bias in one pass (addcmul), the weight and bias [N, 1.., d] per model;
    its backward without the copy of `normed` that addcmul's own makes (normed * value)."""

    @staticmethod
    def forward(normed, weight, bias):
        return torch.addcmul(bias, normed, weight)

    @staticmethod
    def setup_context(ctx, inputs, output):
        normed, weight, _ = inputs
        ctx.save_for_backward(normed, weight)

    @staticmethod
    def backward(ctx, grad):
        normed, weight = ctx.saved_tensors
        rows = tuple(range(1, grad.dim() - 1))  # every dim between the model axis and the features
        need_normed, need_weight, need_bias = ctx.needs_input_grad
        return (grad * weight if need_normed else None,
                (grad * normed).sum(rows, keepdim=True) if need_weight else None,
                grad.sum(rows, keepdim=True) if need_bias else None)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """F.layer_norm over the last dim with a weight and a bias, through `_LayerNorm` (its vmap
    rule) while autograd records."""
    if torch.is_grad_enabled():
        return _LayerNorm.apply(x, weight, bias, eps)[0]
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm over the last dim (same parameters and values) through `layer_norm`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is None or self.bias is None or len(self.normalized_shape) != 1:
            return super().forward(x)
        return layer_norm(x, self.weight, self.bias, self.eps)
