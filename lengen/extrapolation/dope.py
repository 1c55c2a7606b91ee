"""DoPE, Denoising Rotary Position Embedding (Xiong, Fan et al. 2025, arXiv 2511.09146): Dynamic NTK
in every head, and in a few heads chosen by the truncated matrix entropy of their query Gram matrix,
RoPE taken out:

    mode=all       the selected heads attend without any rotation (NoPE in that head);
    mode=parts     in the selected heads, the bands with frequency theta_f < 2 pi / L0 (less than one
                   turn over the trained length; the frequencies after Dynamic NTK) are not rotated,
                   the others keep their (NTK) rotation: the paper's Fig. 1, "mask NTK at low
                   frequency indices";
    mode=keep_low  the literal reading of the paper's band equation (v1 Eq. 32-34, v2 Eq. 13-15):
                   the selected heads keep ONLY the low bands (rotated), their other channels zeroed.

Head selection (`effective_rank`, `select_heads`): Sigma = X^T X of a head's queries on calibration
text at the target length, eigenvalues l_1 >= l_2 >= ...; truncated effective rank
rho_r = exp(-sum_{i<=r} p_i ln p_i), p_i = l_i / sum_{j<=r} l_j (v1 Eq. 30; rank=0: all eigenvalues).
For r = 1 that is 1 for every head; the paper calls Trunc-1 the spectral norm, so lengen scores
r = 1 by tr(Sigma) / l_1 (1 for a rank-one head, d for an isotropic one) and keeps "lowest score =
most concentrated head". Heads are ranked over all layers at once; order=asc selects the `count`
lowest (the paper's ASC), desc the highest. Readings where the paper's two versions disagree (mask
polarity, by-parts' equation) are lengen's choice and said so in docs/training_free.md; the
by-Gaussian variant (noise in place of RoPE, its insertion point unspecified) is not implemented.

The head mask is per layer (`heads`, [H] bool, None = no head selected = Dynamic NTK), set by the
calibration of `lengen.hf` (`lengen.hf.calibration`); the method object of each layer holds its own.
Defaults: the paper's best row at 64K on the original needle task (by-all, query, Trunc-1, 5 heads, ASC).
"""

from __future__ import annotations

import copy
import math

import torch

from lengen.encodings.rope import apply_rotary, rope_cos_sin
from lengen.extrapolation.base import causal_attention, repeat_kv
from lengen.extrapolation.dynamic import DynamicNtk

MODES = ("all", "parts", "keep_low")


def effective_rank(gram: torch.Tensor, rank: int = 1) -> float:
    """The truncated effective rank of a Gram matrix (see the module docstring); rank=0: untruncated."""
    eig = torch.linalg.eigvalsh(gram.double()).flip(0).clamp_min(0.0)   # descending, >= 0
    total = float(eig.sum())
    if total <= 0.0:
        return float("nan")
    if rank == 1:
        return total / float(eig[0])
    top = eig if rank == 0 else eig[:rank]
    p = top / top.sum()
    p = p[p > 0]
    return math.exp(-float((p * p.log()).sum()))


def select_heads(scores: list[torch.Tensor], count: int, order: str = "asc") -> list[torch.Tensor]:
    """Per layer [H] bool: the `count` heads with the lowest (asc) or highest (desc) score over all
    layers together. NaN scores (a head that never saw a non-zero query) are never selected; ties
    go to the earlier layer and head."""
    flat = torch.cat([s.double().flatten() for s in scores])
    valid = ~flat.isnan()
    key = torch.where(valid, flat if order == "asc" else -flat, torch.full_like(flat, math.inf))
    chosen = torch.zeros_like(flat, dtype=torch.bool)
    n = min(int(count), int(valid.sum()))
    chosen[torch.sort(key, stable=True).indices[:n]] = True
    out, start = [], 0
    for s in scores:
        out.append(chosen[start:start + s.numel()].view(s.shape))
        start += s.numel()
    return out


class Dope(DynamicNtk):
    name = "dope"
    kind = "remap"      # beside a frequency method ("yarn:factor=4+dope") it takes that one's frequencies
    remaps = True

    def __init__(self, rope, factor: float | None = None, count: int = 5, rank: int = 1,
                 order: str = "asc", mode: str = "all"):
        super().__init__(rope, factor)
        self.count, self.rank, self.order, self.mode = int(count), int(rank), str(order), str(mode)
        if self.count < 0:
            raise ValueError("count (heads to denoise) must be >= 0")
        if self.rank < 0:
            raise ValueError("rank must be >= 0 (0: the untruncated entropy)")
        if self.order not in ("asc", "desc"):
            raise ValueError("order must be asc or desc")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        self.layer_heads: dict[int, torch.Tensor] | None = None   # layer -> [H] bool (set_heads)
        self.heads: torch.Tensor | None = None                    # this layer's (for_layer)
        self._layers: dict = {}

    @property
    def needs_calibration(self) -> bool:
        """True while no heads are chosen and some are to be (count > 0)."""
        return self.count > 0 and self.layer_heads is None

    def calibration_spec(self) -> str:
        """What the model runs while its heads are scored: Dynamic NTK at this method's factor."""
        return f"dynamic:factor={self.factor:g}"

    def set_heads(self, layer_heads: dict[int, torch.Tensor]) -> None:
        """Per layer index, a [H] bool mask of the heads to denoise (a layer not listed: none)."""
        self.layer_heads = {int(layer): mask.bool().cpu() for layer, mask in layer_heads.items()}
        self._layers = {}

    def with_heads(self, heads: torch.Tensor | None) -> "Dope":
        """A copy of this method denoising the heads marked in `heads` ([H] bool) in every layer."""
        method = copy.copy(self)
        method.heads, method.layer_heads, method._layers = (None if heads is None else heads.bool()), None, {}
        return method

    def for_layer(self, layer: int) -> "Dope":
        return self.layer_copy(layer, self.layer_heads, "heads")

    def attention(self, q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale):
        # a chosen query head's copy of its key head is rotated apart from its group's other copies
        k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
        cq, sq = rope_cos_sin(pos_q.to(q.device), inv_freq, attention_factor)
        ck, sk = rope_cos_sin(pos_k.to(q.device), inv_freq, attention_factor)
        q_rot, k_rot = apply_rotary(q, cq, sq), apply_rotary(k, ck, sk)
        if self.heads is None or not bool(self.heads.any()):
            return causal_attention(q_rot, k_rot, v, pos_q, pos_k, scale)
        low = inv_freq.to(q.device) < 2 * math.pi / self.rope.train_length   # [d/2] below one turn in L0
        low = torch.cat([low, low])                                           # half-split channel layout
        if self.mode == "all":
            low = torch.ones_like(low)

        def denoised(x, cos, sin):
            d = cos.shape[-1]
            if self.mode == "keep_low":   # the literal equation: only the low bands, rotated
                keep = torch.cat([low, torch.ones(x.shape[-1] - d, dtype=torch.bool, device=x.device)])
                return apply_rotary(x, cos, sin) * keep
            return apply_rotary(x, torch.where(low, attention_factor, cos), torch.where(low, 0.0, sin))

        sel = self.heads.to(q.device)[None, :, None, None]
        q = torch.where(sel, denoised(q, cq, sq), q_rot)
        k = torch.where(sel, denoised(k, ck, sk), k_rot)
        return causal_attention(q, k, v, pos_q, pos_k, scale)


class GramScores:
    """A reducer for a calibration pass (lengen.hf.calibration.capture_qk): called as
    reducer(layer, q, k) with a layer's un-rotated q [B, H, T, d] at positions 0..T-1, it sums
    each head's Gram matrix X^T X of its queries ("query" indicator) or of its key head's keys
    ("key": a key head's score is that of every query head reading it), rotated first by the
    method's frequencies at length T when stage="post_ntk" (the paper's best rows), as they are
    when stage="pre" (before any RoPE)."""

    def __init__(self, method: Dope, indicator: str = "query", stage: str = "post_ntk"):
        if indicator not in ("query", "key") or stage not in ("post_ntk", "pre"):
            raise ValueError("indicator must be query or key, stage post_ntk or pre")
        self.method, self.indicator, self.stage = method, indicator, stage
        self.grams: dict[int, torch.Tensor] = {}

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor) -> None:
        x = q if self.indicator == "query" else repeat_kv(k, q.shape[1])
        if self.stage == "post_ntk":
            pos = torch.arange(x.shape[-2], device=x.device)[None]
            inv_freq, factor = self.method.params(x.shape[-2], x.device)
            x = apply_rotary(x, *rope_cos_sin(pos, inv_freq, factor))
        x = x.double()
        gram = torch.einsum("bhti,bhtj->hij", x, x).cpu()
        self.grams[layer] = self.grams.get(layer, 0) + gram

    def scores(self) -> dict[int, torch.Tensor]:
        """layer -> [H] float64: each head's truncated effective rank (the method's `rank`)."""
        return {layer: torch.tensor([effective_rank(g, self.method.rank) for g in grams], dtype=torch.float64)
                for layer, grams in sorted(self.grams.items())}


def choose_heads(method: Dope, scores: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """layer -> [H] bool: the method's `count` heads in its `order`, ranked over all layers."""
    layers = sorted(scores)
    return dict(zip(layers, select_heads([scores[layer] for layer in layers], method.count, method.order)))


def dope_part(method) -> Dope | None:
    """The DoPE part of a method (alone or in a "+" composition), or None."""
    part = getattr(method, "remap", method)
    return part if isinstance(part, Dope) else None
