"""Position interpolation (Chen et al. 2023; HF rope_type "linear"): every frequency divided by
the factor s, i.e. positions squeezed by s.   inv_freq_i = b^(-2i/d) / s,  attention factor 1."""

from __future__ import annotations

from lengen.extrapolation.base import ExtrapolationMethod


def positive_factor(factor) -> float:
    if factor is None:
        raise ValueError("the option factor is required, e.g. factor=4")
    factor = float(factor)
    if factor <= 0:
        raise ValueError("factor must be > 0")
    return factor


class PositionInterpolation(ExtrapolationMethod):
    name = "pi"

    def __init__(self, rope, factor: float | None = None):
        super().__init__(rope)
        self.factor = positive_factor(factor)

    def rope_params(self, seq_len, device=None):
        inv_freq, _ = super().rope_params(seq_len, device)
        return inv_freq / self.factor, 1.0
