"""Dynamic NTK (emozilla 2023; HF rope_type "dynamic"): the NTK base recomputed from the current
sequence length L = max(seq_len, L0):

    b' = b * (s L / L0 - (s - 1))^(d / (d - 2)),   inv_freq_i = b'^(-2i/d),   attention factor 1.

At L <= L0 this is plain RoPE (returned exactly, not through the formula). seq_len is the current
total length, max(position) + 1 as in HF. Since the frequencies change with the length, the KV
cache must hold UN-rotated keys, so one attention layer decoding token t equals a full forward of
t + 1 tokens (HF caches rotated keys and mixes bases: transformers#25104). In a stack of layers
that is not enough: the cached keys of layer 2 and up come from hidden states computed with an
earlier length's frequencies, so exact equality needs the cached tokens re-run when the frequencies
change (lengen.lm does this; lengen.hf decodes with the cache and is exact only for one layer).
"""

from __future__ import annotations

from lengen.encodings.rope import default_inv_freq
from lengen.extrapolation.base import ExtrapolationMethod
from lengen.extrapolation.ntk import ntk_base
from lengen.extrapolation.pi import positive_factor


class DynamicNtk(ExtrapolationMethod):
    name = "dynamic"
    length_dependent = True

    def __init__(self, rope, factor: float | None = None):
        super().__init__(rope)
        self.factor = positive_factor(factor)

    def rope_params(self, seq_len, device=None):
        d, L0 = self.rope.rotary_dim, self.rope.train_length
        if seq_len <= L0:
            return default_inv_freq(d, self.rope.base).to(device), 1.0
        alpha = self.factor * seq_len / L0 - (self.factor - 1)
        return default_inv_freq(d, ntk_base(self.rope.base, d, alpha)).to(device), 1.0
