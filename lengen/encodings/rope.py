"""Rotary position embedding (Su et al. 2021) in the half-split layout of Hugging Face checkpoints:
channel k pairs with k + d/2. The rotation angle is position x inv_freq, computed in float32.

Option `fraction` (p-RoPE, Barbero et al., "Round and Round We Go! What makes Rotary Positional
Encodings useful?", ICLR 2025; registered on its own as `p_rope`, lengen/encodings/p_rope.py): only
the R = floor(p d / 2) highest frequencies rotate, the others are 0, so pairs R..d/2-1 (channels
[R, d/2) and [d/2 + R, d)) are position-free (NoPE) channels. The kept frequencies are RoPE's own,
b^(-2i/d) over the full head dim, not HF's `partial_rotary_factor` (which rotates the first p d
channels with b^(-2i/(p d))). A zero frequency is cos 1, sin 0: the same rotation code applies.

The functions here are shared by the training-free extrapolation methods, which change
`inv_freq`, the `attention_factor` multiplying cos and sin, or the positions themselves."""

from __future__ import annotations

import torch

from lengen.encodings.base import PositionalEncoding
from lengen.errors import LengenError
from lengen.kernels import rotary
from lengen.kernels.model_stack import as_stack


def default_inv_freq(dim: int, base: float = 10000.0) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


def rotated_pairs(dim: int, fraction: float) -> int:
    """R = int(p d // 2): how many of the d/2 pairs p-RoPE rotates (the paper's pseudocode and
    gemma's `apply_rope(rope_proportion)`)."""
    return int(fraction * dim // 2)


def keep_highest_frequencies(inv_freq: torch.Tensor, fraction: float) -> torch.Tensor:
    """p-RoPE's frequencies: w_i for i < R (the highest, inv_freq being decreasing in i), 0 for
    R <= i < d/2 (Barbero et al. 2025: the lowest frequencies switched off). Unchanged
    (the same tensor) for fraction 1."""
    if fraction >= 1.0:
        return inv_freq
    r = rotated_pairs(2 * inv_freq.shape[-1], fraction)
    keep = torch.arange(inv_freq.shape[-1], device=inv_freq.device) < r
    return torch.where(keep, inv_freq, torch.zeros_like(inv_freq))


def check_fraction(fraction, dim: int) -> float:
    """p-RoPE's p as a float in (0, 1] that rotates at least one of the d/2 pairs, or LengenError."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise LengenError(f"rope option fraction must be a number in (0, 1], got {fraction!r}")
    fraction = float(fraction)
    if not 0.0 < fraction <= 1.0:
        raise LengenError(f"rope option fraction must be in (0, 1] (1 = RoPE; 0 would be --pe none), got {fraction}")
    if rotated_pairs(dim, fraction) < 1:
        raise LengenError(f"rope option fraction={fraction} rotates int({fraction} x {dim} // 2) = 0 of the "
                          f"{dim // 2} frequency pairs of head dim {dim}: that is NoPE (--pe none); raise it")
    return fraction


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
    """apply_rotary on q and k with a hand-written backward (the rotation by -angle), one pass per
    tensor each way on CUDA (four on the CPU) instead of autograd's chunk/neg/cat/mul/add graph:
    the training hot path of RoPE models, where these tensors are small and overhead dominates.
    Under vmap (a group of models) its rule rotates the whole stack at once with the same
    Function: the plain-op graph moved ~2x the bytes (benchmarks/step_traffic.py)."""

    @staticmethod
    def _rotate(x, c, s, sign):
        # [x1, x2] -> [x1 c - sign x2 s, x2 c + sign x1 s]   (sign -1: the inverse rotation);
        # one pass over memory on CUDA (lengen.kernels.rotary)
        return rotary.rotate(x, c, s, sign)

    @staticmethod
    def forward(q, k, cq, sq, ck, sk):
        return _RotatePair._rotate(q, cq, sq, 1.0), _RotatePair._rotate(k, ck, sk, 1.0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[2:])

    @staticmethod
    def backward(ctx, gq, gk):
        cq, sq, ck, sk = ctx.saved_tensors
        return (_RotatePair._rotate(gq, cq, sq, -1.0), _RotatePair._rotate(gk, ck, sk, -1.0),
                None, None, None, None)

    @staticmethod
    def vmap(info, in_dims, q, k, cq, sq, ck, sk):
        """The stack's physical tensors, the model axis first (as_stack; a table shared by the
        models is expanded, a view): q, k [N, B, H, T, d], a table [N, 1.., T, d/2]."""
        n = info.batch_size
        q, k, cq, sq, ck, sk = (as_stack(t, d, n) for t, d in zip((q, k, cq, sq, ck, sk), in_dims))
        return _RotatePair.apply(q, k, cq, sq, ck, sk), (0, 0)


def rotate_pair(q, k, cos_q, sin_q, cos_k, sin_k):
    """(apply_rotary(q, cos_q, sin_q), apply_rotary(k, cos_k, sin_k)) for float32 or bf16 q, k rotated over
    their whole head dim, with the cheaper hand-written backward, also under vmap; apply_rotary
    otherwise."""
    d = cos_q.shape[-1]
    # bf16 too (a group's bf16 activations): computed in float32 against the tables, stored bf16
    if q.dtype not in (torch.float32, torch.bfloat16) or k.dtype != q.dtype or d != q.shape[-1] or d != k.shape[-1]:
        return apply_rotary(q, cos_q, sin_q), apply_rotary(k, cos_k, sin_k)
    h = d // 2  # the tables repeat their first half: cos(p w_i) for channel i and i + d/2
    return rotate_pair_halves(q, k, cos_q[..., :h], sin_q[..., :h], cos_k[..., :h], sin_k[..., :h])


def rotate_pair_halves(q, k, cos_q, sin_q, cos_k, sin_k):
    """The hand-written rotation of float32 q, k [B, H, T, d] by half tables [..., d/2] (pair i:
    channels i and i + d/2), which must broadcast against [B, H, T, d/2] and get no gradient; not
    under vmap (rotate_pair's conditions are the caller's)."""
    return _RotatePair.apply(q, k, cos_q, sin_q, cos_k, sin_k)


class RopeEncoding(PositionalEncoding):
    relative = True
    rotary = True

    def __init__(self, cfg, base: float = 10000.0, rotary_dim: int | None = None, fraction: float = 1.0):
        super().__init__(cfg)
        self.base = float(base)
        self.rotary_dim = int(rotary_dim or cfg.head_dim)
        self.fraction = check_fraction(fraction, self.rotary_dim)
        if self.fraction < 1.0 and self.rotary_dim != cfg.head_dim:
            raise LengenError(f"rope options fraction and rotary_dim do not combine: p-RoPE (fraction={self.fraction}) "
                              f"rotates the highest frequencies of the whole head dim {cfg.head_dim}; give one of them")
        inv_freq = keep_highest_frequencies(default_inv_freq(self.rotary_dim, self.base), self.fraction)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def prepare(self, pos_q, pos_k):
        cos_q, sin_q = rope_cos_sin(pos_q, self.inv_freq)
        if pos_k is pos_q:
            return cos_q, sin_q, cos_q, sin_q
        return (cos_q, sin_q, *rope_cos_sin(pos_k, self.inv_freq))

    def transform_qk(self, layer, state, q, k):
        return rotate_pair(q, k, *state)
