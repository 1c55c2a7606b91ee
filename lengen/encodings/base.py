"""The interface every positional encoding implements.

Positions are data: the model passes a position tensor (int or float, shape [1, T] shared by the
batch or [B, T]) and each encoding reads what it needs from it. An encoding may use any of five
hooks, which the model calls in this order:

  embed(x, pos)                        absolute encodings add to the token embeddings
  prepare(pos_q, pos_k) -> state       once per forward pass: work shared by all layers
  transform_qk(layer, state, q, k)     rotate or augment queries/keys (RoPE, Transformer-XL)
  bias(layer, state) -> [B|1,H,Tq,Tk]  an additive attention bias (ALiBi, T5, FIRE, ...)
  qk_bias(layer, state, q, k, scale, causal) -> [B,H,Tq,Tk]
                                       an additive bias computed from the queries and keys
                                       themselves (content-dependent positions: CoPE)

Tensors q, k are [B, H, T, head_dim]. `transform_qk` may return a wider head dim (the extra
columns join the dot product); the softmax scale is fixed beforehand from the model's head dim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from lengen.errors import LengenError

if TYPE_CHECKING:  # the model imports the encodings; only type hints go the other way
    from lengen.models.config import ModelConfig


class PositionalEncoding(nn.Module):
    #: whether non-integer positions make sense (False for lookup tables and integer buckets)
    accepts_float_positions: bool = True
    #: whether the encoding attends only through relative positions (shift invariant)
    relative: bool = False
    #: whether the causal form assumes keys never have a larger position than their query (a
    #: signed distance taken as a penalty, or clamped): ids that do not grow along the sequence
    #: (arithmetic's coupled positions) are read wrongly
    causal_past_only: bool = False
    #: whether this is RoPE (or a subclass): training-free extrapolation methods
    #: (lengen.extrapolation) replace its rotation in the layers that use it, reading its
    #: rotary_dim, base and fraction
    rotary: bool = False
    #: parameters kept in [min, max] (None: open) by projecting them in place before each
    #: forward pass, a projected-gradient constraint (KERPLE); `project` applies it, and a stack
    #: of models trained together applies it to the stacked weights (lengen.che.group)
    bounds: dict[str, tuple[float | None, float | None]] = {}

    @property
    def position_table_size(self) -> int | None:
        """Rows of a position lookup table, when the encoding has one (positions must be below)."""
        return None

    def __init__(self, cfg: "ModelConfig"):
        super().__init__()
        self.cfg = cfg

    # -- checks -------------------------------------------------------------------------------
    def check_sampler(self, sampler) -> None:
        """Refuse an incompatible position sampler at config time."""
        if not sampler.integer and not self.accepts_float_positions:
            raise LengenError(
                f"encoding {self.name!r} needs integer positions, but the position sampler "
                f"{type(sampler).__name__} produces floats"
            )

    def check_positions(self, pos: torch.Tensor) -> None:
        """Runtime check on the actual positions (cheap; overridden by table lookups)."""
        if pos.is_floating_point() and not self.accepts_float_positions:
            raise LengenError(f"encoding {self.name!r} needs integer positions, got floats")

    @property
    def name(self) -> str:
        return getattr(self, "registry_name", type(self).__name__)

    def for_layer(self, layer: int) -> "PositionalEncoding":
        """The encoding block `layer` uses: itself (a per-layer pattern answers per layer)."""
        return self

    def project(self) -> None:
        """Clamp the `bounds` parameters into their domain, in place: not part of the graph."""
        with torch.no_grad():  # not .data: this also runs on stacked weights under vmap
            for name, (lo, hi) in self.bounds.items():
                p = getattr(self, name)
                p.copy_(p.clamp(min=lo, max=hi))  # clamp_ has no batching rule under vmap

    # -- hooks (defaults: do nothing) ---------------------------------------------------------
    def embed(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return x

    def prepare(self, pos_q: torch.Tensor, pos_k: torch.Tensor) -> Any:
        return None

    def transform_qk(self, layer: int, state: Any, q: torch.Tensor, k: torch.Tensor):
        return q, k

    def bias(self, layer: int, state: Any) -> torch.Tensor | None:
        return None

    def qk_bias(self, layer: int, state: Any, q: torch.Tensor, k: torch.Tensor, scale: float,
                causal: bool) -> torch.Tensor | None:
        """An additive bias [B, H, Tq, Tk] that reads q and k as the softmax sees them (after key
        norm, `transform_qk` and logit scaling: logits = scale * q.k + bias + qk_bias). `causal`:
        the Tq queries are the last Tq of the Tk keys (a KV cache holds the earlier ones). None
        (the default) costs nothing; a bias from it materialises B x H x Tq x Tk."""
        return None


def relative_distance(pos_q: torch.Tensor, pos_k: torch.Tensor) -> torch.Tensor:
    """i - j for every (query i, key j) pair, float32, shape [B|1, 1, Tq, Tk] (a head axis)."""
    return (pos_q.float()[:, None, :, None] - pos_k.float()[:, None, None, :])


def sinusoid_angles(pos: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """pos * base^(-2k/dim) for k < dim/2, in float32: shape [*pos.shape, dim/2]."""
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float32, device=pos.device) / dim)
    return pos.float()[..., None] * inv_freq
