"""Absolute sinusoid added to the embeddings, [sin | cos] concatenated as in Ruoss et al.
(Vaswani interleaves; the two differ only by a fixed permutation of channels)."""

import torch

from lengen.encodings.base import PositionalEncoding, sinusoid_angles


def sinusoid_table(pos: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """[..., dim] = [sin(p w_k) for k < dim/2] ++ [cos(p w_k)], w_k = base^(-2k/dim)."""
    angles = sinusoid_angles(pos, dim, base)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class SinCosEncoding(PositionalEncoding):
    def __init__(self, cfg, base: float = 10000.0):
        super().__init__(cfg)
        self.base = float(base)

    def embed(self, x, pos):
        return x + sinusoid_table(pos, self.cfg.d_model, self.base).to(x.dtype)
