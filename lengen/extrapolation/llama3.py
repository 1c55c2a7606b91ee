"""Llama 3.1 frequency scaling (HF rope_type "llama3"): by wavelength wl_i = 2 pi / theta_i, with
L0 the original length, s the factor, lf / hf the low / high frequency factors:

    wl_i < L0 / hf   (fast)   -> theta_i
    wl_i > L0 / lf   (slow)   -> theta_i / s
    otherwise                 -> (1 - a) theta_i / s + a theta_i,  a = (L0 / wl_i - lf) / (hf - lf)
Attention factor 1. Meta's release: s = 8, lf = 1, hf = 4, L0 = 8192 (here L0 = the training length).
"""

from __future__ import annotations

import math

import torch

from lengen.encodings.rope import default_inv_freq
from lengen.extrapolation.base import ExtrapolationMethod
from lengen.extrapolation.pi import positive_factor


class Llama3(ExtrapolationMethod):
    name = "llama3"

    def __init__(self, rope, factor: float | None = None, low_freq_factor: float = 1.0,
                 high_freq_factor: float = 4.0):
        super().__init__(rope)
        self.factor = positive_factor(factor)
        self.low_freq_factor, self.high_freq_factor = float(low_freq_factor), float(high_freq_factor)
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError("high_freq_factor must exceed low_freq_factor")

    def rope_params(self, seq_len, device=None):
        theta = default_inv_freq(self.rope.rotary_dim, self.rope.base)
        L0, s, lf, hf = self.rope.train_length, self.factor, self.low_freq_factor, self.high_freq_factor
        wavelen = 2 * math.pi / theta
        slow = torch.where(wavelen > L0 / lf, theta / s, theta)
        smooth = (L0 / wavelen - lf) / (hf - lf)
        medium = (wavelen >= L0 / hf) & (wavelen <= L0 / lf)
        inv_freq = torch.where(medium, (1 - smooth) * slow / s + smooth * slow, slow)
        return inv_freq.to(device), 1.0
