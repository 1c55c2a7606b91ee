"""YaRN (Peng et al. 2023; HF rope_type "yarn"): NTK-by-parts interpolation plus an attention factor.

With L0 the original length, d the rotary dim, b the base and s the factor:
    dim(r) = d ln(L0 / (2 pi r)) / (2 ln b)          (the channel pair rotating r times over L0)
    low = floor(dim(beta_fast)), high = ceil(dim(beta_slow))   (no rounding if truncate=False),
          clamped to [0, d - 1]; high += 0.001 if equal
    ramp_i = clip((i - low) / (high - low), 0, 1),   i = 0 .. d/2 - 1
    inv_freq_i = theta_i (1 - ramp_i) + (theta_i / s) ramp_i
    attention factor = attention_factor if given,
                       else mscale(s, mscale) / mscale(s, mscale_all_dim) if both are given,
                       else 0.1 ln s + 1,              with mscale(s, m) = 0.1 m ln s + 1 (1 if s <= 1)
It multiplies cos and sin (HF convention), so logits scale by its square.
Defaults beta_fast = 32, beta_slow = 1 (0 also means the default, as in HF), truncate = True.
"""

from __future__ import annotations

import math

import torch

from lengen.extrapolation.base import ExtrapolationMethod
from lengen.extrapolation.pi import positive_factor


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def correction_dim(rotations: float, dim: int, base: float, length: int) -> float:
    return dim * math.log(length / (rotations * 2 * math.pi)) / (2 * math.log(base))


class Yarn(ExtrapolationMethod):
    name = "yarn"

    def __init__(self, rope, factor: float | None = None, beta_fast: float = 32, beta_slow: float = 1,
                 truncate: bool = True, attention_factor: float | None = None,
                 mscale: float | None = None, mscale_all_dim: float | None = None):
        super().__init__(rope)
        self.factor = positive_factor(factor)
        self.beta_fast = float(beta_fast or 32)
        self.beta_slow = float(beta_slow or 1)
        self.truncate = bool(truncate)
        if attention_factor is not None:
            self.attention_factor = float(attention_factor)
        elif mscale and mscale_all_dim:
            self.attention_factor = yarn_mscale(self.factor, mscale) / yarn_mscale(
                self.factor, mscale_all_dim)
        else:
            self.attention_factor = yarn_mscale(self.factor)

    def correction_range(self) -> tuple[float, float]:
        d, b, L0 = self.rope.rotary_dim, self.rope.base, self.rope.train_length
        low = correction_dim(self.beta_fast, d, b, L0)
        high = correction_dim(self.beta_slow, d, b, L0)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        return max(low, 0), min(high, d - 1)

    def rope_params(self, seq_len, device=None):
        d = self.rope.rotary_dim
        low, high = self.correction_range()
        if low == high:
            high += 0.001  # as HF: avoid a zero-width ramp
        ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        pos_freqs = self.rope.base ** (torch.arange(0, d, 2).float() / d)
        extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (self.factor * pos_freqs)
        keep = 1 - ramp  # weight of the unscaled frequency
        inv_freq = interpolation * (1 - keep) + extrapolation * keep
        return inv_freq.to(device), self.attention_factor
