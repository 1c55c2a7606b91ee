"""The contract every positional encoding keeps (tests/test_encoding_contract.py checks it for each
name in ENCODINGS; adding one: a PositionalEncoding subclass and one `ENCODINGS.add` line).

Positions are data: the model passes a position tensor and each encoding reads what it needs from
it. Shapes: pos, pos_q, pos_k are [1, T] (shared by the batch) or [B, T]; int64 from the integer
samplers, float32 from a float one (equal_mean); any values >= 0, not necessarily 0..T-1,
contiguous or increasing (randomized, PoSE, arithmetic's coupled ids). q, k are [B, H, T, head_dim].

Construction: `__init__(cfg, **options)`, cfg a ModelConfig (cfg.train_tokens may be None), the
options `cfg.pe_options` (refuse a bad value with a LengenError). Parameters are drawn from torch's
generator, which the run seeds, so a group member gets the weights it gets alone. Everything that
differs between two seeds must be an nn.Parameter (requires_grad=False when fixed, as FoPE's A):
a group stacks parameters only and runs every member with the first member's buffers.

Class attributes (declarations the runs read, and the contract test derives its expectations from):
  accepts_float_positions  False: float positions are refused (check_sampler, check_positions)
  position_table_size      rows of a position table (positions must be below), or None
  causal_past_only         the causal form assumes no key has a larger position than its query:
                           arithmetic's coupled ids are refused (lengen.arith.config)
  relative                 logits invariant to shifting every position (tests/test_encodings_bias_family.py)
  bounds                   {parameter: (min, max)} projected in place before each forward (KERPLE)
  rotary                   RoPE: training-free methods replace its rotation (below)
  name                     the registry name (set by build_encoding); every refusal names it

Hooks (the defaults do nothing but the float checks), in the order of a forward; `layer` is the block:
  check_positions(pos)                the actual positions, before the forward and outside vmap
                                      (a group passes its stacked [N, 1|B, T], padding included):
                                      the place for checks that read values
  embed(x, pos) -> x                  x [B, T, d_model] the token embeddings; absolute encodings add
  prepare(pos_q, pos_k) -> state      once per forward: work shared by every layer; pos_k is pos_q
                                      (the same object) without a KV cache
  transform_qk(layer, state, q, k)    -> (q, k) in their dtype: rotate or augment (RoPE,
                                      Transformer-XL); after key norm, before logit scaling; it may
                                      return a wider head dim (the extra columns join the dot
                                      product), the softmax scale being fixed from the model's
  bias(layer, state)                  -> a float tensor broadcastable to [B, H, Tq, Tk] (usually
                                      [B|1, H, Tq, Tk]) added to the logits (ALiBi, T5, FIRE, ...), or
                                      None; finite also where the causal mask hides a pair (NaN
                                      survives the mask); not multiplied by logit scaling
  qk_bias(layer, state, q, k, scale, causal) -> [B, H, Tq, Tk] or None: a bias from q, k as the
                                      softmax sees them, after key norm, transform_qk and logit
                                      scaling (CoPE): logits = scale * q.k + bias + qk_bias
and beside them:
  check_sampler(sampler)              at config time (lengen.positions.check_positions_fit, which
                                      then holds position_table_size against the sampler's bound):
                                      refuse with a one-line LengenError naming the encoding
  for_layer(layer) -> encoding        the encoding that serves the layer (a pattern answers per
                                      layer; the decoder asks whether a RoPE method applies to it)
  project()                           clamps the `bounds` parameters (no_grad, copy_ of clamp: it runs
                                      on stacked weights too); KERPLE calls it in prepare, a group
                                      on its stack before each step

Outside the hooks the model does the rest: the causal mask, dropout, logit scaling, the KV cache.
The state returned by prepare is read by every layer: hooks must not write into it or their inputs.

Requirements that hold on every path:
  * Grouped training (lengen.che.group) runs embed, prepare and the layer hooks under
    torch.func.vmap over the stacked weights and positions of N models, each sequence padded at the
    end to the step's longest (padded positions 0, padded keys masked by the caller). So a hook
    - writes in place only into tensors allocated from its batched inputs (x.new_empty(...),
      torch.zeros_like(x)), never into torch.empty/zeros/ones of a bare shape;
    - uses no torch.autograd.Function without a vmap rule (a `vmap` staticmethod as rope's
      _RotatePair, or generate_vmap_rule=True);
    - reads no tensor value into Python (int(t), t.item(), `if t.any()`): checks that read values
      belong in check_positions; shapes are fine (each member's own under vmap);
    - draws no random numbers and keeps no tensors on self between calls;
    - gives a real (query, key) pair a value that depends on that pair's positions (and q, k) only,
      not on T or on the other tokens' positions (padding changes both).
  * KV-cache decoding (lengen.lm.model.DecoderLM): embed gets the new tokens' positions, prepare
    pos_q [1, Tq] of the new tokens and pos_k [1, Tk] of all keys, the cached and the new (pos_k is
    not pos_q), transform_qk the new queries and every key (the cache keeps keys before
    transform_qk), bias and qk_bias Tq x Tk with the queries the last Tq keys (causal=True). The
    logits must equal those of one full forward pass: read positions from pos_q and pos_k, never
    from token indices (torch.arange(T)), and do not assume Tq == Tk.
  * Float positions: without accepts_float_positions = False, any float32 positions must work.
  * Precision: hooks may run under autocast (bf16); compute position functions in float32
    (pos.float()), the callers cast biases to q's dtype.
  * RoPE extrapolation methods (lengen.extrapolation) act on encodings that declare
    rotary = True (RopeEncoding and its subclasses), replacing their prepare/transform_qk at
    evaluation and reading their rotary_dim, base and fraction; other encodings are refused them.

tests/test_encoding_contract.py checks this for every registered encoding on every path: a CHE
model trains; grouped = solo with dropout 0 and 0.1, padded to the step's longest (the vmap and
padding requirements); KV-cache decoding = the full forward; an MLM and an arithmetic model
(standard and coupled ids) train; every sampler trains or is refused in one line as the
declarations say; and test-only encodings that break a requirement (an in-place write into
torch.empty, a Function without a vmap rule, a value read in a hook, a seed-drawn buffer, token
index distances, an undeclared table) fail it.
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
