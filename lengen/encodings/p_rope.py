"""p-RoPE (Barbero et al., "Round and Round We Go! What makes Rotary Positional Encodings
useful?", ICLR 2025, arXiv 2410.06205): RoPE with only the fraction p of highest frequencies,
`--pe p_rope` (default p = 0.25: the paper's 0.25-RoPE of Table 2, and Gemma 4's full-attention layers) or the same as
`--pe rope --pe-option fraction=P`. The frequencies and the rotation are RopeEncoding's
(lengen/encodings/rope.py, where the equations are): w_i = b^(-2i/d) for i < R = int(p d // 2),
w_i = 0 for R <= i < d/2, and q, k rotated by position x w_i in the half-split layout."""

from __future__ import annotations

from lengen.encodings.rope import RopeEncoding


class PRopeEncoding(RopeEncoding):
    def __init__(self, cfg, base: float = 10000.0, fraction: float = 0.25):
        super().__init__(cfg, base=base, fraction=fraction)
