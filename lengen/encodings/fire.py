"""FIRE (Li et al. 2023, arXiv 2310.04418): a learned function of the normalised distance.

Causal attention, the paper's formula:

    b_h(i, j) = f(psi(i - j) / psi(max(L, i)))_h,    psi(x) = log(c x + 1)

with c a learnable scalar (init 0.1), L = |init_L * L_mult| a learnable threshold (L_mult init 1,
the public code's parametrisation) and f an MLP 1 -> 32 -> 32 -> H (ReLU, no final activation;
the paper's two hidden layers). i, j are the position values of the tensor, floats allowed.

Bidirectional attention (ModelConfig.causal False): the public versions feed |i - j| and so
cannot tell left from right. Here the MLP gets two inputs,

    [psi(|i - j|) / psi(max(L, i, j)), sign(i - j)]

The sign gives direction; the normaliser max(L, i, j) >= |i - j| keeps the first input in [0, 1]
for any length, which is what progressive interpolation is for (max(L, i) would let keys far to
the right of an early query reach psi(j)/psi(L) >> 1).

`fire` has one module per layer; `fire_shared` (FIRE-S) one module for all layers, whose bias is
computed once per forward pass.
"""

from __future__ import annotations

import torch
from torch import nn

from lengen.encodings.base import PositionalEncoding, relative_distance
from lengen.errors import LengenError

TRANSFORMS = ("log", "identity")


def fire_mlp(in_features: int, out_features: int, depth: int, width: int) -> nn.Sequential:
    """`depth` hidden layers of `width` with ReLU, a linear output (depth 0: one linear map)."""
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(in_features, width), nn.ReLU()]
        in_features = width
    layers.append(nn.Linear(in_features, out_features))
    return nn.Sequential(*layers)


class FireBias(nn.Module):
    """One FIRE function: positions in, an additive bias [B|1, H, Tq, Tk] out (float32)."""

    def __init__(self, num_heads: int, causal: bool, depth: int, width: int, init_c: float,
                 init_L: float, transform: str, eps: float):
        super().__init__()
        self.causal, self.transform, self.eps = causal, transform, eps
        self.mlp = fire_mlp(1 if causal else 2, num_heads, depth, width)
        self.c = nn.Parameter(torch.tensor(float(init_c)))
        self.register_buffer("init_L", torch.tensor(float(init_L)))
        self.L_mult = nn.Parameter(torch.tensor(1.0))

    def psi(self, x: torch.Tensor) -> torch.Tensor:
        # |c| as in the public code: a c pushed below 0 by a gradient step must not give log(<0).
        return torch.log(self.c.abs() * x + 1.0) if self.transform == "log" else x

    def threshold(self) -> torch.Tensor:
        return (self.L_mult * self.init_L).abs()

    def forward(self, pos_q: torch.Tensor, pos_k: torch.Tensor) -> torch.Tensor:
        # fp32 even under autocast: log of small distances and a tiny MLP, cheap either way.
        with torch.autocast(pos_q.device.type, enabled=False):
            dist = relative_distance(pos_q, pos_k)[:, 0]          # [B|1, Tq, Tk], i - j
            qi = pos_q.float()[:, :, None]                          # query positions i
            if self.causal:
                # Future keys (i - j < 0) are masked anyway; clamp so psi never sees a negative
                # argument (a NaN there would survive the -inf mask as NaN).
                num = self.psi(dist.clamp(min=0.0))
                norm = self.psi(torch.maximum(qi, self.threshold()))
                features = (num / (norm + self.eps))[..., None]
            else:
                far = torch.maximum(qi, pos_k.float()[:, None, :])  # max(i, j)
                num = self.psi(dist.abs())
                norm = self.psi(torch.maximum(far, self.threshold()))
                features = torch.stack([num / (norm + self.eps), dist.sign()], dim=-1)
            # contiguous: a permuted view would be copied once per batch row by the attention
            # kernel when it broadcasts the bias (measured: +30% step time at batch 128)
            return self.mlp(features.float()).permute(0, 3, 1, 2).contiguous()  # [B|1, H, Tq, Tk]


class FireEncoding(PositionalEncoding):
    """Per-layer FIRE. Options: depth (hidden layers, 2), width (32), init_c (0.1), init_L
    (default: ModelConfig.train_tokens when set, else 512 as in the public code), transform
    ("log", or "identity" for psi(x) = x), eps (1e-6)."""

    shared = False
    causal_past_only = True  # causal: negative distances are clamped to 0

    def __init__(self, cfg, depth: int = 2, width: int = 32, init_c: float = 0.1,
                 init_L: float | None = None, transform: str = "log", eps: float = 1e-6):
        super().__init__(cfg)
        if transform not in TRANSFORMS:
            raise LengenError(f"fire: transform must be one of {TRANSFORMS}, got {transform!r}")
        if depth < 0 or width < 1:
            raise LengenError(f"fire: need depth >= 0 and width >= 1, got {depth}, {width}")
        # With init_L far above the training length (512 vs ~80 tokens on CHE) the normaliser is
        # a constant during training and FIRE never sees progressive interpolation.
        if init_L is None:
            init_L = cfg.train_tokens or 512
        n = 1 if self.shared else cfg.num_layers
        self.fire = nn.ModuleList(
            FireBias(cfg.num_heads, cfg.causal, depth, width, init_c, init_L, transform, eps)
            for _ in range(n)
        )

    def prepare(self, pos_q, pos_k):
        return pos_q, pos_k

    def bias(self, layer, state):
        return self.fire[layer](*state)


class FireSharedEncoding(FireEncoding):
    """FIRE-S: one FIRE function for all layers, evaluated once per forward pass."""

    shared = True

    def prepare(self, pos_q, pos_k):
        return self.fire[0](pos_q, pos_k)

    def bias(self, layer, state):
        return state
