"""KERPLE (Chi et al. 2022): kernelised relative biases with learned per-head, per-layer shapes.

    kerple_log:    b_h(i, j) = -r1_h log(1 + r2_h |i - j|)
    kerple_power:  b_h(i, j) = -a_h |i - j|^p_h

As in the official code (chijames/KERPLE): r1 ~ U(0, 2), r2 ~ U(0, 1), a ~ U(0, 1), p ~ U(0, 2) at
init, and each forward pass first projects them back into their domain in place (r1, r2, a >= 1e-2;
p in [1e-2, 2]); a projected-gradient constraint rather than a reparametrisation.

The official code is causal only. In a bidirectional model |i - j| alone cannot tell left from
right, so there each head learns two sets of parameters, one for past keys (j <= i) and one for
future keys (j > i); they start at independent random values.
"""

from __future__ import annotations

import torch
from torch import nn

from lengen.encodings.base import PositionalEncoding, relative_distance

EPS = 1e-2  # the official lower clamp


class _Kerple(PositionalEncoding):
    relative = True
    #: name -> (init upper bound of U(0, hi), clamp min, clamp max)
    PARAMS: dict[str, tuple[float, float, float | None]] = {}

    def __init__(self, cfg):
        super().__init__(cfg)
        sides = 1 if cfg.causal else 2  # [past, future] in a bidirectional model
        for name, (hi, _, _) in self.PARAMS.items():
            self.register_parameter(name, nn.Parameter(torch.rand(cfg.num_layers, sides, cfg.num_heads) * hi))

    @property
    def bounds(self):
        # the official code clamps through .data: a projection, not part of the graph
        return {name: (lo, hi) for name, (_, lo, hi) in self.PARAMS.items()}

    def param(self, name: str, layer: int, dist: torch.Tensor) -> torch.Tensor:
        """The per-pair parameter, [1|B, H, Tq, Tk] or [H, 1, 1]: future keys use side 1."""
        p = getattr(self, name)[layer][:, :, None, None]  # [sides, H, 1, 1]
        if p.shape[0] == 1:
            return p[0]
        return torch.where(dist < 0, p[1], p[0])

    def prepare(self, pos_q, pos_k):
        self.project()
        return relative_distance(pos_q, pos_k)  # i - j, [B|1, 1, Tq, Tk]


class KerpleLogEncoding(_Kerple):
    PARAMS = {"r1": (2.0, EPS, None), "r2": (1.0, EPS, None)}

    def bias(self, layer, dist):
        return -self.param("r1", layer, dist) * torch.log1p(self.param("r2", layer, dist) * dist.abs())


class KerplePowerEncoding(_Kerple):
    PARAMS = {"a": (1.0, EPS, None), "p": (2.0, EPS, 2.0)}

    def bias(self, layer, dist):
        return -self.param("a", layer, dist) * dist.abs().pow(self.param("p", layer, dist))
