"""The position rule of a remapping method as data (`RemapRule`), and the tile counts of the
one-pass Triton kernel (`lengen.kernels.triton_remap`) for a rule: pure Python + torch, no Triton.

Every remapping method scores a causal pair (query at p_i, key at p_j, delta = p_i - p_j) near
(q rotated by p_i, k by p_j) or far (q rotated by f_q(p_i), k by f_k(p_j)). A `RemapRule` says
which and where, with h(p) = p / group (floored when `floor`):

  near   window rule (chunk = 0):  0 <= delta < window
         chunk rule  (chunk = s):  p_j <= p_i <= window + s floor(p_j / s)      (DCA, window = C)
  far    every other causal pair, if p_j < n_global (the Lambda-mask's global keys; inf: all)
  f_q(p) = min(q_mul h(p) + q_add, q_max)
  f_k(p) = 0 (k_mode "zero"), h(p) ("h") or p mod chunk ("mod")

The kernel classifies each (query tile, key tile) from the tiles' position ranges, as
`classify` does here: skipped (no causal pair), near (no far pair), far (no near pair) or
straddling (both: two dot products, a per-element choice). `tile_counts` counts them for
contiguous positions 0..T-1 (prefill); `cost_over_sdpa` turns the counts into the expected
work relative to a causal flash attention with the same tiles: (near + far + 2 straddling) /
causal tiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

INF = math.inf
K_MODES = ("zero", "h", "mod")


@dataclass(frozen=True)
class RemapRule:
    """A remapping method's per-pair position rule (see the module docstring)."""

    window: float
    chunk: float = 0.0
    group: float = 1.0
    floor: bool = False
    q_mul: float = 1.0
    q_add: float = 0.0
    q_max: float = INF
    k_mode: str = "h"
    n_global: float = INF

    def __post_init__(self):
        if self.k_mode not in K_MODES:
            raise ValueError(f"k_mode must be one of {K_MODES}, not {self.k_mode!r}")
        if self.group <= 0 or self.chunk < 0 or (self.k_mode == "mod" and self.chunk <= 0):
            raise ValueError("group must be > 0, chunk >= 0 (> 0 for k_mode 'mod')")

    def far_query(self, p: torch.Tensor) -> torch.Tensor:
        return (self.q_mul * self._h(p) + self.q_add).clamp(max=self.q_max)

    def far_key(self, p: torch.Tensor) -> torch.Tensor:
        if self.k_mode == "zero":
            return torch.zeros_like(p)
        if self.k_mode == "mod":
            return p - self.chunk * torch.floor(p / self.chunk)
        return self._h(p)

    def _h(self, p):
        x = p / self.group
        return torch.floor(x) if self.floor else x


def classify(rule: RemapRule, q_min, q_max, k_min, k_max):
    """(near_any, far_any, near_full, far_full) of tiles from their position ranges (tensors that
    broadcast): whether some / every pair of the tile is near / far. Conservative: "any" may be
    True for a tile without such a pair (the kernel then masks it per element), "full" never
    wrongly True. The kernel (triton_remap._classify) applies the same inequalities."""
    causal = q_max >= k_min
    if rule.chunk > 0:
        t_min = rule.window + rule.chunk * torch.floor(k_min / rule.chunk)
        t_max = rule.window + rule.chunk * torch.floor(k_max / rule.chunk)
        near_any = causal & (q_min <= t_max)
        far_any = q_max > t_min
        near_full = (q_min >= k_max) & (q_max <= t_min)
        far_full = q_min > t_max
    else:
        d_min, d_max = q_min - k_max, q_max - k_min
        near_any = causal & (d_min < rule.window)
        far_any = d_max >= rule.window
        near_full = (d_min >= 0) & (d_max < rule.window)
        far_full = d_min >= rule.window
    far_any = far_any & (k_min < rule.n_global)
    far_full = far_full & (k_max < rule.n_global)
    return near_any, far_any, near_full, far_full


def tile_ranges(pos: torch.Tensor, block: int):
    """(min, max) float64 per block of `block` positions of a 1-D position tensor."""
    pos = pos.double()
    pad = -pos.shape[-1] % block
    lo = torch.nn.functional.pad(pos, (0, pad), value=INF).view(-1, block).amin(1)
    hi = torch.nn.functional.pad(pos, (0, pad), value=-INF).view(-1, block).amax(1)
    return lo, hi


def tile_counts(rule: RemapRule | None, length: int, block_m: int = 64, block_n: int = 64,
                query_rows: int | None = None) -> dict:
    """Tiles of one (batch, head) of the kernel for contiguous positions 0..length-1, queries the
    last `query_rows` of them (default all: prefill; 1: decoding one token): counts of
    "straddling", "near", "far", "skipped", "total" (= every tile pair), "computed" (not
    skipped) and "causal" (the tiles a causal flash attention with these blocks computes).
    rule None: plain RoPE, every causal tile near."""
    rows = length if query_rows is None else int(query_rows)
    pos = torch.arange(length, dtype=torch.float64)
    q_lo, q_hi = tile_ranges(pos[length - rows:], block_m)
    k_lo, k_hi = tile_ranges(pos, block_n)
    q_lo, q_hi, k_lo, k_hi = q_lo[:, None], q_hi[:, None], k_lo[None, :], k_hi[None, :]
    causal = q_hi >= k_lo
    if rule is None:
        near_any, far_any = causal, torch.zeros_like(causal)
    else:
        near_any, far_any, _, _ = classify(rule, q_lo, q_hi, k_lo, k_hi)
    counts = {
        "straddling": int((near_any & far_any).sum()),
        "near": int((near_any & ~far_any).sum()),
        "far": int((far_any & ~near_any).sum()),
        "skipped": int((~near_any & ~far_any).sum()),
        "total": causal.numel(),
        "causal": int(causal.sum()),
    }
    counts["computed"] = counts["total"] - counts["skipped"]
    return counts


def cost_over_sdpa(counts: dict) -> float:
    """Expected work of the kernel relative to a causal flash attention with the same tiles: a
    straddling tile computes two dot products, the others one."""
    work = counts["near"] + counts["far"] + 2 * counts["straddling"]
    return work / max(1, counts["causal"])
