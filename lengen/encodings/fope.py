"""FoPE, Fourier Position Embedding (Hua et al., ICML 2025, arXiv 2412.17739), as its official code
implements it (yiju-zhao/Fourier-Position-Embedding, `olmo/model.py::FourierEmbedding` with the
released configs: `fourier_separate_basis`, `fourier_separate_head`, `fourier_ignore_zero`,
`rope_clamp_floor_freq` + `rope_clamp_floor_to_zero`, `fourier_init: eye_xavier_norm`). The
paper's own equation numbers were not read; the lines below name the step of the method (the
paper's two changes to RoPE: each dimension a Fourier series, the under-trained frequencies
zeroed) and the function of the official code they follow.

d = head dim, b = base, L = the training length (`ModelConfig.train_tokens`, kept at evaluation:
the clipping floor belongs to the trained model), n = a position value (floats allowed).

  w_k = b^(-2k/d), k < d/2                       RoPE's frequencies (`get_inv_freq`)
  keep w_k >= 2 pi / L, K = how many are kept    zero-out of under-trained frequencies, whose
                                                 period exceeds L (clamp_floor_to_zero), the
                                                 zeros then dropped (fourier_ignore_zero)
  M = min(K, d/4)                                Fourier slots (`output_dim`)
  C_h[n, m] = sum_k cos(w_k n) A^cos_h[k, m]     each slot a Fourier series over the kept
  S_h[n, m] = sum_k sin(w_k n) A^sin_h[k, m]     frequencies, per head h, separate cos/sin
                                                 coefficients (`apply_rotary_pos_emb`)
  C = S = 1 for slots M <= m < d/2               padding (`F.pad(..., value=1)`): the pair maps
                                                 to (x1 - x2, x1 + x2), position-free
  x' = x C + rotate_half(x) S                    RoPE's rotation with C, S in place of cos, sin
                                                 (half-split layout: channel m pairs with m + d/2)

Each layer has its own A^cos, A^sin [H, K, M] (the code builds one FourierEmbedding per block) and
applies them to q and k. Init (`reset_parameters`, eye_xavier_norm): xavier_normal with gain
sigma on [H, K, M] (fan_in K M, fan_out H M), plus a step eye, 1 at [h, i ceil(K/M), i] for
i < M (the identity when K = M). sigma (option `gain`) is 0.3 as in the 60M config (0.4, 0.6 for
180M, 1.2B). A is fixed at its init, as in the code (`fourier_learnable` defaults to False and no
released config sets it); option `learnable=true` trains it.

Example (tests/test_encodings_rope_variants.py): d = 64, L = 512, b = 1e4 give floor 0.012272,
w_15 = 0.013335 kept and w_16 = 0.01 zeroed: K = M = 16, 16 Fourier slots and 16 constant ones.

Not shift invariant (the cross terms of two different frequencies depend on n and j, not n - j),
so `relative = False`. Options: `base` (1e4), `gain` (0.3), `learnable` (false), `length` (L; the
model's train_tokens by default, 512, the released configs' L, when unknown).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from lengen.encodings.base import PositionalEncoding
from lengen.encodings.rope import apply_rotary, default_inv_freq, rotate_pair_halves
from lengen.errors import LengenError

#: L when the model config does not know its training length (the released 512-token configs)
DEFAULT_LENGTH = 512


def fope_frequencies(dim: int, base: float, length: float) -> torch.Tensor:
    """The kept RoPE frequencies w_k >= 2 pi / L, float32, decreasing (K of them). On the CPU
    whatever the default device: K is a shape (a sweep checks models on the meta device)."""
    with torch.device("cpu"):
        inv_freq = default_inv_freq(dim, base)
    return inv_freq[inv_freq >= 2 * math.pi / length]


def step_eye(heads: int, kept: int, slots: int) -> torch.Tensor:
    """[H, K, M]: 1 at [h, i ceil(K/M), i] for i < M (`get_step_eye`; the identity when K = M)."""
    eye = torch.zeros(heads, kept, slots)
    step = math.ceil(kept / slots)
    for i in range(slots):
        if i * step < kept:
            eye[:, i * step, i] = 1.0
    return eye


def _number(name: str, value, kind=float):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
        raise LengenError(f"fope option {name} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    return kind(value)


class FopeEncoding(PositionalEncoding):
    relative = False

    def __init__(self, cfg, base: float = 10000.0, gain: float = 0.3, learnable: bool = False,
                 length: int | None = None):
        super().__init__(cfg)
        d, H = cfg.head_dim, cfg.num_heads
        self.base, self.gain = _number("base", base), _number("gain", gain)
        if not isinstance(learnable, bool):
            raise LengenError(f"fope option learnable must be true or false, got {learnable!r}")
        self.learnable = learnable
        self.length = (cfg.train_tokens or DEFAULT_LENGTH) if length is None else _number("length", length, int)
        if self.length < 1:
            raise LengenError(f"fope option length (L, the training length) must be >= 1, got {self.length}")
        if self.base <= 1.0:
            raise LengenError(f"fope option base must be > 1 (RoPE's base), got {self.base}")
        if self.gain < 0:
            raise LengenError(f"fope option gain (the xavier gain of A's init) must be >= 0, got {self.gain}")
        if d % 2 or d < 4:
            raise LengenError(f"fope needs an even head dim of at least 4 (d/4 Fourier slots), got {d}")
        freqs = fope_frequencies(d, self.base, self.length)
        if freqs.numel() == 0:
            raise LengenError(f"fope keeps the frequencies with a period within the training length L={self.length}: "
                              f"none (the highest, 1, needs L >= 7); give a longer --pe-option length")
        self.kept, self.slots = freqs.numel(), min(freqs.numel(), d // 4)
        self.register_buffer("freqs", freqs, persistent=False)
        coef = [self._init_coef(H) for _ in range(2 * cfg.num_layers)]  # per layer: A^sin then A^cos, as the code
        self.sin_coef = nn.Parameter(torch.stack(coef[0::2]), requires_grad=learnable)  # [layers, H, K, M]
        self.cos_coef = nn.Parameter(torch.stack(coef[1::2]), requires_grad=learnable)

    def _init_coef(self, heads: int) -> torch.Tensor:
        a = torch.empty(heads, self.kept, self.slots)
        nn.init.xavier_normal_(a, gain=self.gain)  # std = gain sqrt(2 / (K M + H M)) on [H, K, M]
        return a + step_eye(heads, self.kept, self.slots)

    def prepare(self, pos_q, pos_k):
        def angles(pos):  # cos(w_k n), sin(w_k n): [B|1, T, K], float32
            a = pos.float()[..., None] * self.freqs.to(pos.device)
            return a.cos(), a.sin()

        q = angles(pos_q)
        return (*q, *q) if pos_k is pos_q else (*q, *angles(pos_k))

    def _tables(self, cos, sin, layer):
        """C, S [B|1, H, T, d/2]: the Fourier slots, then the constant ones."""
        with torch.autocast(cos.device.type, enabled=False):  # the tables in float32, as RoPE's angles
            c = torch.einsum("btk,hkm->bhtm", cos, self.cos_coef[layer].float())
            s = torch.einsum("btk,hkm->bhtm", sin, self.sin_coef[layer].float())
        pad = self.cfg.head_dim // 2 - self.slots
        if pad:
            ones = c.new_ones(*c.shape[:-1], pad)
            c, s = torch.cat([c, ones], dim=-1), torch.cat([s, ones], dim=-1)
        return c, s

    def transform_qk(self, layer, state, q, k):
        cq, sq = self._tables(state[0], state[1], layer)
        ck, sk = (cq, sq) if state[2] is state[0] else self._tables(state[2], state[3], layer)
        if self.learnable or q.dtype != torch.float32 or k.dtype != torch.float32:
            # autograd's path: gradients for A (learnable), other dtypes
            def rotate(x, c, s):
                return apply_rotary(x, torch.cat([c, c], dim=-1), torch.cat([s, s], dim=-1))

            return rotate(q, cq, sq), rotate(k, ck, sk)
        return rotate_pair_halves(q, k, cq, sq, ck, sk)  # RoPE's hand-written backward (A fixed: no gradient)
