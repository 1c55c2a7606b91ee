"""DPE, Dimension-wise Positional Embeddings manipulation (Lu et al. 2025, arXiv 2504.18857;
LuLuLuyi/DPE's `dpe_for_llama.py`): Self-Extend's floor grouping with a group size of its own per
band of RoPE frequencies, applied only to each head's "key" frequency pairs.

The d/2 frequency pairs (pair j = channels j and j + d/2, highest frequency first) split into
G = len(scales) equal groups; group g has the group size s_g. With delta = p_i - p_j:

  near  delta < W            every pair at its true position (ordinary RoPE)
  far   delta >= W           a key pair j of group g (mask[h, j]): q at floor(p_i / s_g) + W - W / s_g,
                             k at floor(p_j / s_g), i.e. about (p_i - p_j) / s_g + W(1 - 1/s_g);
                             any other pair: q at p_i, k at p_j (true positions)

merged exactly by the two-piece blockwise attention (`lengen.extrapolation.blockwise`), with the far
q and k rotated per pair instead of one position per token. The key pairs are a [H, d/2] bool mask
per layer: the top-k pairs of each head by c[h, j] = mean_t |q_t[h, j]| |k_t[kv(h), j]| (pre-RoPE
pair norms of the same token), from a short calibration pass (`PairScores`; lengen.hf.calibration,
lengen.lm.methods). Without a mask (not calibrated, or topk = every pair) every pair is a key pair.

Decoding re-rotates the un-rotated cached keys with the same float shift W - W/s_g as the prefill,
so it equals a full forward; the authors' decode uses the integer W - floor(W/s_g), which differs
only when s_g does not divide W.

Options: scales (required: one group size >= 1 per group, joined by "-" in a spec, e.g.
`dpe:scales=4-4-2-16-32-32-16-128,window=1024,topk=48`, the authors' Llama-3-8B-Instruct 8K ->
128K setting; a list in Python), window W (default L0 / 8: their 1024 at 8K), topk (default 3/4
of the pairs: their 48 of 64), block. There is no default for scales: the authors pick each
group's by a needle search at the target length (`lengen hf tune` searches them).
"""

from __future__ import annotations

import math

import torch

from lengen.encodings.rope import apply_rotary
from lengen.errors import LengenError
from lengen.extrapolation.base import repeat_kv
from lengen.extrapolation.remap import RemapMethod, rotate
from lengen.kernels.remap_tiles import RemapRule

SCALES_EXAMPLE = "4-4-2-16-32-32-16-128"


def parse_scales(value) -> list[float]:
    """Group sizes from a spec value ("4-4-2", a number) or a list; ValueError naming the problem."""
    if value is None:
        raise ValueError(f"scales is required: one group size per frequency group, joined by '-' "
                         f"(e.g. scales={SCALES_EXAMPLE}, the authors' Llama-3-8B 8K -> 128K)")
    if isinstance(value, str):
        items = [x.strip() for x in value.split("-")]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    try:
        scales = [float(x) for x in items if not isinstance(x, (bool, complex))]
    except (TypeError, ValueError):
        scales = []
    if not scales or len(scales) != len(items) or not all(math.isfinite(s) for s in scales):
        raise ValueError(f"scales must be numbers joined by '-' (e.g. {SCALES_EXAMPLE}), got {value!r}")
    if min(scales) < 1:
        raise ValueError(f"scales must be >= 1 (a group size; 1 keeps the true positions), got {value!r}")
    return scales


class Dpe(RemapMethod):
    name = "dpe"
    list_separator = "-"   # how a list option is written in a spec (lengen.hf.methods)

    def __init__(self, rope, scales=None, window: int | None = None, topk: int | None = None, **blocking):
        super().__init__(rope, **blocking)
        self.scales = parse_scales(scales)
        n, groups = rope.rotary_dim // 2, len(self.scales)
        if n < 1 or n % groups:
            raise ValueError(f"the {n} frequency pairs of rotary_dim {rope.rotary_dim} do not split into "
                             f"{groups} equal groups, one per scale: give a number of scales dividing {n}")
        self.n_pairs = n
        self.window = int(window) if window is not None else max(1, rope.train_length // 8)
        self.topk = int(topk) if topk is not None else max(1, round(3 * n / 4))
        if self.window < 1:
            raise ValueError("window must be >= 1")
        if not 1 <= self.topk <= n:
            raise ValueError(f"topk must be in 1..{n} (the frequency pairs of rotary_dim {rope.rotary_dim}), "
                             f"got {self.topk}")
        self.key_pairs: dict[int, torch.Tensor] | None = None  # layer -> [H, n] bool (set_key_pairs)
        self.mask: torch.Tensor | None = None                  # this layer's (for_layer); None: every pair
        self._layers: dict = {}

    @classmethod
    def from_options(cls, rope, options=None):
        method = super().from_options(rope, options)
        if "scales" in method.options:   # a list given in Python reads back as a spec: "4-4-2"
            method.options["scales"] = "-".join(repr(s) if s != int(s) else str(int(s)) for s in method.scales)
        return method

    # ---- key pairs ------------------------------------------------------------------------------
    @property
    def needs_calibration(self) -> bool:
        """True when top-k selects fewer than every pair and no key pairs are set yet."""
        return self.topk < self.n_pairs and self.key_pairs is None

    def set_key_pairs(self, key_pairs: dict[int, torch.Tensor]) -> None:
        """Per layer index, a [H, n_pairs] bool mask of the pairs that are grouped (the rest keep
        their true positions); a layer not listed groups every pair."""
        for layer, mask in key_pairs.items():
            if mask.dtype != torch.bool or mask.dim() != 2 or mask.shape[1] != self.n_pairs:
                raise LengenError(f"dpe: layer {layer}'s key pairs must be a [heads, {self.n_pairs}] bool "
                                  f"mask, got {mask.dtype} {tuple(mask.shape)}")
        self.key_pairs = {int(layer): mask.cpu() for layer, mask in key_pairs.items()}
        self._layers = {}

    def for_layer(self, layer: int) -> "Dpe":
        return self.layer_copy(layer, self.key_pairs, "mask")

    # ---- positions --------------------------------------------------------------------------------
    def pair_scales(self) -> torch.Tensor:
        """[n_pairs] float64: each pair's group size."""
        return torch.tensor(self.scales, dtype=torch.float64).repeat_interleave(self.n_pairs // len(self.scales))

    def grouped_positions(self, pos: torch.Tensor, query: bool) -> torch.Tensor:
        """[B|1, T, n_pairs] float64: a key pair's far position, floor(p / s) (+ W - W / s for queries)."""
        s = self.pair_scales().to(pos.device)
        p = torch.floor(pos.double()[..., None] / s)
        return p + (self.window - self.window / s) if query else p

    def remap_rule(self) -> RemapRule:
        """Self-Extend's window rule (which pairs are near or far); the kernel takes each pair's
        far position from kernel_pair_groups. The group is the lowest-frequency one's, as below."""
        s = self.scales[-1]
        return RemapRule(self.window, group=s, floor=True, q_add=self.window - self.window / s)

    def kernel_pair_groups(self, heads: int, device=None) -> torch.Tensor:
        """[heads, n_pairs] float64 on `device`: each head's group size per frequency pair, 0 where
        the pair keeps its true position (not a key pair); the Triton kernel's `pair_groups`
        (lengen.kernels.flex_remap hands it over). Made once per mask, heads and device: a decode
        step's layers would otherwise each copy it from the host."""
        mask, tables = self.__dict__.get("_pair_tables", (None, None))
        if tables is None or mask is not self.mask:   # a layer copy shares its parent's until here
            tables = {}
            self._pair_tables = (self.mask, tables)
        key = (heads, str(device))
        if key not in tables:
            groups = self.pair_scales()[None].expand(heads, -1)
            if self.mask is not None:
                if self.mask.shape[0] != heads:
                    raise LengenError(f"dpe: key pairs for {self.mask.shape[0]} heads, the attention has {heads}")
                groups = torch.where(self.mask, groups, 0.0)
            tables[key] = groups.contiguous().to(device)
        return tables[key]

    # RemapMethod's relative_positions reads these: the lowest-frequency group's key pairs
    def far_query_positions(self, pos_q):
        s = self.scales[-1]
        return torch.floor(pos_q.double() / s) + (self.window - self.window / s)

    def far_key_positions(self, pos_k):
        return torch.floor(pos_k.double() / self.scales[-1])

    def far_rotated(self, q, k, pos_q, pos_k, inv_freq):
        return (self._rotate_pairs(q, pos_q, inv_freq, query=True),
                self._rotate_pairs(k, pos_k, inv_freq, query=False))

    def _rotate_pairs(self, x, pos, inv_freq, query: bool):
        """x [B, H, T, d] with each key pair rotated by its grouped position, every other pair by
        the true one: both rotations of all pairs, then a per-head channel select (cos and sin
        stay [B, 1, T, d], shared by the heads)."""
        angle = self.grouped_positions(pos.to(x.device), query).float() * inv_freq.to(x.device)
        emb = torch.cat([angle, angle], dim=-1)[:, None]
        grouped = apply_rotary(x, emb.cos(), emb.sin())
        if self.mask is None:
            return grouped
        if self.mask.shape[0] != x.shape[1]:
            raise LengenError(f"dpe: key pairs for {self.mask.shape[0]} heads, the attention has {x.shape[1]}")
        pair = self.mask.to(x.device)
        rotary = 2 * self.n_pairs
        channel = torch.cat([pair, pair, pair.new_zeros(pair.shape[0], x.shape[-1] - rotary)], dim=-1)
        return torch.where(channel[None, :, None, :], grouped, rotate(x, pos, inv_freq))


class PairScores:
    """A reducer for a calibration pass (lengen.hf.patch.capture_qk, lengen.lm.methods.capture_qk):
    called as reducer(layer, q, k) with a layer's un-rotated q [B, H, Tq, d] and k [B, Hk, Tk, d]
    (half-split layout), it sums |q_t[h, j]| |k_t[kv(h), j]| over tokens t (the key of the same
    token: the last Tq keys), pair j = channels (j, j + r/2) of the r = rotary_dim rotated ones."""

    def __init__(self, rotary_dim: int):
        self.half = rotary_dim // 2
        self.sums: dict[int, torch.Tensor] = {}
        self.counts: dict[int, int] = {}

    def pair_norms(self, x: torch.Tensor) -> torch.Tensor:
        """[..., n_pairs] float64: the norm of each channel pair."""
        x = x.double()
        return torch.sqrt(x[..., :self.half] ** 2 + x[..., self.half:2 * self.half] ** 2)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor) -> None:
        tq = q.shape[-2]
        k = repeat_kv(k[..., -tq:, :], q.shape[1])
        total = (self.pair_norms(q) * self.pair_norms(k)).sum(dim=(0, 2)).cpu()
        self.sums[layer] = self.sums.get(layer, 0) + total
        self.counts[layer] = self.counts.get(layer, 0) + q.shape[0] * tq

    def scores(self) -> dict[int, torch.Tensor]:
        """layer -> c [H, n_pairs] float64, the mean over every token seen."""
        return {layer: self.sums[layer] / self.counts[layer] for layer in sorted(self.sums)}


def top_pairs(scores: dict[int, torch.Tensor], topk: int) -> dict[int, torch.Tensor]:
    """layer -> [H, n_pairs] bool: each head's topk highest-scoring pairs."""
    out = {}
    for layer, c in scores.items():
        mask = torch.zeros(c.shape, dtype=torch.bool)
        mask.scatter_(-1, torch.topk(c, topk, dim=-1).indices, True)
        out[layer] = mask
    return out


def dpe_part(method) -> Dpe | None:
    """The DPE part of a method (alone or in a "+" composition), or None."""
    part = getattr(method, "remap", method)
    return part if isinstance(part, Dpe) else None
