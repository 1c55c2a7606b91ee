"""Rotary position embedding (Su et al. 2021) in the half-split layout of Hugging Face checkpoints:
channel k pairs with k + d/2. The rotation angle is position x inv_freq, computed in float32.

The functions here are shared by the training-free extrapolation methods, which change
`inv_freq`, the `attention_factor` multiplying cos and sin, or the positions themselves."""

from __future__ import annotations

import torch
from torch._C._functorch import is_batchedtensor

from lengen.encodings.base import PositionalEncoding


def default_inv_freq(dim: int, base: float = 10000.0) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


def rope_cos_sin(pos: torch.Tensor, inv_freq: torch.Tensor, attention_factor: float = 1.0):
    """cos, sin of shape [B|1, 1, T, dim] for positions [B|1, T] (a head axis for broadcasting)."""
    freqs = pos.float()[..., None] * inv_freq.to(pos.device)
    emb = torch.cat([freqs, freqs], dim=-1)[:, None]
    return emb.cos() * attention_factor, emb.sin() * attention_factor


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first cos.shape[-1] channels of x (partial rotary leaves the rest unchanged)."""
    d = cos.shape[-1]
    if d == x.shape[-1]:
        return (x * cos + rotate_half(x) * sin).to(x.dtype)
    rot, rest = x[..., :d], x[..., d:]
    return torch.cat([(rot * cos + rotate_half(rot) * sin).to(x.dtype), rest], dim=-1)


class _RotatePair(torch.autograd.Function):
    """apply_rotary on q and k with a hand-written backward (the rotation by -angle), in four
    elementwise passes per tensor each way instead of autograd's chunk/neg/cat/mul/add graph:
    the training hot path of RoPE models, where these tensors are small and overhead dominates."""

    @staticmethod
    def _rotate(x, c, s, sign):
        # [x1, x2] -> [x1 c - sign x2 s, x2 c + sign x1 s]   (sign -1: the inverse rotation)
        h = x.shape[-1] // 2
        if x.dim() == 4:  # [B, H, T, d] stored as [B, T, H, d], the layout of the fused projection
            B, H, T, d = x.shape
            out = torch.empty(B, T, H, d, dtype=x.dtype, device=x.device).transpose(1, 2)
        else:
            out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        x1, x2, o1, o2 = x[..., :h], x[..., h:], out[..., :h], out[..., h:]
        torch.mul(x1, c, out=o1).addcmul_(x2, s, value=-sign)
        torch.mul(x2, c, out=o2).addcmul_(x1, s, value=sign)
        return out

    @staticmethod
    def forward(ctx, q, k, cq, sq, ck, sk):
        ctx.save_for_backward(cq, sq, ck, sk)
        return _RotatePair._rotate(q, cq, sq, 1.0), _RotatePair._rotate(k, ck, sk, 1.0)

    @staticmethod
    def backward(ctx, gq, gk):
        cq, sq, ck, sk = ctx.saved_tensors
        return (_RotatePair._rotate(gq, cq, sq, -1.0), _RotatePair._rotate(gk, ck, sk, -1.0),
                None, None, None, None)


def rotate_pair(q, k, cos_q, sin_q, cos_k, sin_k):
    """(apply_rotary(q, cos_q, sin_q), apply_rotary(k, cos_k, sin_k)) for float32 q, k rotated over
    their whole head dim, with the cheaper hand-written backward; apply_rotary otherwise (and under
    vmap, which the hand-written Function does not support)."""
    d = cos_q.shape[-1]
    if (q.dtype != torch.float32 or k.dtype != torch.float32 or d != q.shape[-1] or d != k.shape[-1]
            or is_batchedtensor(q) or is_batchedtensor(k)):  # under torch.func.vmap (a group of models)
        return apply_rotary(q, cos_q, sin_q), apply_rotary(k, cos_k, sin_k)
    h = d // 2  # the tables repeat their first half: cos(p w_i) for channel i and i + d/2
    return _RotatePair.apply(q, k, cos_q[..., :h], sin_q[..., :h], cos_k[..., :h], sin_k[..., :h])


class RopeEncoding(PositionalEncoding):
    relative = True

    def __init__(self, cfg, base: float = 10000.0, rotary_dim: int | None = None):
        super().__init__(cfg)
        self.base = float(base)
        self.rotary_dim = int(rotary_dim or cfg.head_dim)
        self.register_buffer("inv_freq", default_inv_freq(self.rotary_dim, self.base), persistent=False)

    def prepare(self, pos_q, pos_k):
        cos_q, sin_q = rope_cos_sin(pos_q, self.inv_freq)
        if pos_k is pos_q:
            return cos_q, sin_q, cos_q, sin_q
        return (cos_q, sin_q, *rope_cos_sin(pos_k, self.inv_freq))

    def transform_qk(self, layer, state, q, k):
        return rotate_pair(q, k, *state)
