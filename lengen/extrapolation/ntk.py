"""NTK-aware scaling (bloc97 2023), static: the base grows so that the lowest frequency is
divided by exactly s while the highest is unchanged.

    b' = b * s^(d / (d - 2)),   inv_freq_i = b'^(-2i/d),   attention factor 1.
"""

from __future__ import annotations

from lengen.encodings.rope import default_inv_freq
from lengen.extrapolation.base import ExtrapolationMethod
from lengen.extrapolation.pi import positive_factor


def ntk_base(base: float, dim: int, alpha: float) -> float:
    return base * alpha ** (dim / (dim - 2))


class NtkAware(ExtrapolationMethod):
    name = "ntk"

    def __init__(self, rope, factor: float | None = None):
        super().__init__(rope)
        self.factor = positive_factor(factor)

    def rope_params(self, seq_len, device=None):
        d = self.rope.rotary_dim
        return default_inv_freq(d, ntk_base(self.rope.base, d, self.factor)).to(device), 1.0
