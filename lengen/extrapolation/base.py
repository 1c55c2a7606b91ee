"""The interface of training-free extrapolation methods for RoPE attention.

A method never changes weights. It may change
  - the rotary frequencies and the cos/sin multiplier:  rope_params(...) -> (inv_freq, attention_factor)
  - a per-query multiplier (log-n):                      query_scale(pos_q) -> [B|1, 1, Tq, 1] or None
  - the attention itself, from UN-rotated q and k:       attention(...) -> output or None
    (position remapping: ReRoPE, Leaky ReRoPE, Self-Extend, Lambda-mask / sinks).
Methods compose with "+": "rerope:window=128+logn". Every method receives the model's training
length (the original context L0) and its own options.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RopeSpec:
    """What a method needs to know about the model's rotary embedding."""

    rotary_dim: int          # channels rotated per head (half-split layout)
    base: float = 10000.0    # rope theta
    train_length: int = 2048 # L0: the context length the model was trained on


class ExtrapolationMethod:
    name: str = "rope"

    def __init__(self, rope: RopeSpec, **options):
        if options:
            raise TypeError(f"unexpected options {sorted(options)}")
        self.rope = rope

    def rope_params(self, seq_len: int, device=None) -> tuple[torch.Tensor, float]:
        """(inv_freq [rotary_dim/2] float32, attention_factor) for a sequence of seq_len tokens."""
        from lengen.encodings.rope import default_inv_freq

        return default_inv_freq(self.rope.rotary_dim, self.rope.base).to(device), 1.0

    def query_scale(self, pos_q: torch.Tensor) -> torch.Tensor | None:
        return None

    def attention(self, q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale):
        """Causal attention from un-rotated q [B,H,Tq,d], k, v [B,H,Tk,d] at positions
        pos_q [B|1,Tq], pos_k [B|1,Tk]; return [B,H,Tq,d], or None for ordinary RoPE."""
        return None
