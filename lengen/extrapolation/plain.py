"""Plain RoPE: inv_freq_i = b^(-2i/d), attention factor 1, true positions."""

from __future__ import annotations

from lengen.extrapolation.base import ExtrapolationMethod


class PlainRope(ExtrapolationMethod):
    name = "rope"
