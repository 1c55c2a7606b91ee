"""Attention probabilities of every layer, captured during one forward pass.

The fused kernel behind `SelfAttention.attend` never materialises the probabilities, so a forward
hook on each layer's attention module recomputes them from that layer's own input with
`SelfAttention.attention_probs` (the same q/k transforms, key norm, logit scaling, bias and causal
mask as `attend`). The hooks are removed when the pass ends, even if it fails."""

from __future__ import annotations

import torch

from lengen.inspect.hooks import forward_with_hooks
from lengen.models.attention import SelfAttention


def attention_modules(model) -> list[SelfAttention]:
    """The SelfAttention module of every block, first layer first (a CHEModel or a Transformer)."""
    encoder = getattr(model, "encoder", model)
    return [block.attn for block in encoder.blocks]


@torch.no_grad()
def attention_maps(model, inputs: torch.Tensor, output_length: int,
                   positions: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Run `model(inputs, output_length, positions)` once in eval mode and return the attention
    probabilities of every layer, each [B, H, T, T] float32 on the CPU (T = input + output tokens)."""
    maps: list[torch.Tensor] = []

    def hook(module, args, kwargs, output):
        x = args[0] if args else kwargs["x"]
        ctx = args[1] if len(args) > 1 else kwargs["ctx"]
        q, k, _ = module.project(x)
        maps.append(module.attention_probs(q, k, ctx).cpu())

    forward_with_hooks(model, attention_modules(model), hook, inputs, output_length, positions, with_kwargs=True)
    return maps


def head_summaries(probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean over heads, element-wise max over heads) of one layer's [H, T, T] or [B, H, T, T]
    probabilities. The mean is itself a distribution over keys; the max shows a pattern that one
    head has and the others would wash out in the mean (its rows do not sum to 1)."""
    return probs.mean(dim=-3), probs.amax(dim=-3)
