"""The interface of training-free extrapolation methods for RoPE attention.

A method never changes weights. It may change three things, each through one hook:

  rope_params(seq_len, device) -> (inv_freq [rotary_dim/2] float32, attention_factor)
      the rotary frequencies and the multiplier of cos and sin (HF convention: both q and k are
      multiplied, so logits scale by attention_factor**2). Frequency methods: rope, pi, ntk,
      dynamic, yarn, llama3.
  query_scale(pos_q) -> [B|1, 1, Tq, 1] or None
      a per-query multiplier (log-n).
  attention(q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale) -> [B, H, Tq, d] or None
      the attention itself from UN-rotated q and k, for methods that remap relative positions
      (rerope, leaky_rerope, self_extend, lambda, sinks). None means ordinary rotated attention.

Methods compose with "+" (`lengen.extrapolation.build_method("yarn:factor=4+rerope+logn", rope)`):
one frequency method, at most one remapping method, and log-n.

Callers use two entry points:
  method.attend(q, k, v, pos_q, pos_k, scale)   causal attention (key pos <= query pos) from
                                                 UN-rotated q [B,H,Tq,d], k, v [B,Hk,Tk,d]
  method.rotate_qk(q, k, pos_q, pos_k)          rotated (and log-n scaled) q, k for callers that
                                                 run their own SDPA; refused by remapping methods
Both derive the sequence length (for dynamic NTK) as max(position) + 1, like HF, unless given.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lengen.encodings.rope import apply_rotary, default_inv_freq, keep_highest_frequencies, rope_cos_sin
from lengen.errors import LengenError
from lengen.kernels.heads import repeat_kv  # noqa: F401 - re-exported: lengen.hf.banded uses it here


@dataclass
class RopeSpec:
    """What a method needs to know about the model's rotary embedding."""

    rotary_dim: int          # channels rotated per head (half-split layout)
    base: float = 10000.0    # rope theta
    train_length: int = 2048 # L0: the context length the model was trained on
    # p-RoPE's p (lengen.encodings.rope): the model's pairs R = int(p d // 2) and above have
    # frequency 0 (NoPE channels). A method changes the frequencies of the rotated pairs and
    # leaves those channels position-free, as the model was trained (`params` zeroes them).
    fraction: float = 1.0


# Options every method accepts: they override the RopeSpec field of that name for this method only
# (not `fraction`: it is what the model was trained with, not a choice of the method).
ROPE_OVERRIDES = ("rotary_dim", "base", "train_length")


def attention_dtype(q, k, v):
    """q, k, v in one dtype, as SDPA takes them: autocast's where it is on (a bf16 run's
    projections are bf16, while transformers' float32 rotary tables, even the identity ones a
    remapping method installs, leave q and k float32), else the inputs' promoted dtype. The
    methods' own kernels (the fused CPU attention, flex, Triton) are not autocast and need one."""
    device = q.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
    else:
        dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    return q.to(dtype), k.to(dtype), v.to(dtype)


class ExtrapolationMethod:
    """Plain RoPE; subclasses override one hook each (see the module docstring)."""

    name: str = "rope"
    kind: str = "frequency"        # "frequency" | "remap" | "scale": what a "+" part may combine with
    remaps: bool = False           # True when attention() replaces rotated attention
    length_dependent: bool = False # True when rope_params depends on seq_len (dynamic)

    def __init__(self, rope: RopeSpec):
        self.rope = rope
        self.options: dict = {}
        self._params_cache: tuple | None = None

    @classmethod
    def from_options(cls, rope: RopeSpec, options: dict | None = None) -> "ExtrapolationMethod":
        """Build from spec options; `rotary_dim`, `base`, `train_length` override the RopeSpec."""
        options = dict(options or {})
        overrides = {key: options.pop(key) for key in ROPE_OVERRIDES if key in options}
        if overrides:
            rope = dataclasses.replace(rope, **overrides)
        valid = option_names(cls)
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise LengenError(
                f"unknown option(s) {', '.join(unknown)} for method {cls.name!r}; "
                f"valid: {', '.join(valid + list(ROPE_OVERRIDES))}"
            )
        try:
            method = cls(rope, **options)
        except (TypeError, ValueError) as e:
            raise LengenError(f"bad options {options} for method {cls.name!r}: {e}") from None
        method.options = {**overrides, **options}
        return method

    # ---- hooks -------------------------------------------------------------------------------
    def rope_params(self, seq_len: int, device=None) -> tuple[torch.Tensor, float]:
        """(inv_freq [rotary_dim/2] float32, attention_factor) for a sequence of seq_len tokens."""
        return default_inv_freq(self.rope.rotary_dim, self.rope.base).to(device), 1.0

    def query_scale(self, pos_q: torch.Tensor) -> torch.Tensor | None:
        return None

    def attention(self, q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale):
        """Causal attention from un-rotated q [B,H,Tq,d], k, v [B,Hk,Tk,d] (Hk divides H) at
        positions pos_q [B|1,Tq], pos_k [B|1,Tk]; return [B,H,Tq,d], or None for ordinary RoPE."""
        return None

    def relative_positions(self, pos_q: torch.Tensor, pos_k: torch.Tensor) -> torch.Tensor:
        """r(i, j) [B|1, Tq, Tk] float64 as the attention sees it; NaN where masked (here: causal)."""
        delta = pos_q.double()[:, :, None] - pos_k.double()[:, None, :]
        return delta.masked_fill(delta < 0, float("nan"))

    def for_layer(self, layer: int) -> "ExtrapolationMethod":
        """The method as attention layer `layer` applies it: itself, except for methods with
        per-layer state (DPE's key frequency pairs, DoPE's heads). Callers that know the layer call it."""
        return self

    def layer_copy(self, layer: int, state: dict | None, attr: str) -> "ExtrapolationMethod":
        """for_layer of a method whose per-layer state a calibration sets (`state`: layer -> value,
        None until set): a copy holding state[layer] (None for a layer not listed) in `attr`, made
        once per layer and kept in `_layers`, which setting the state again must clear."""
        if state is None:
            return self
        layers = self.__dict__.setdefault("_layers", {})
        if layer not in layers:
            method = copy.copy(self)
            setattr(method, attr, state.get(layer))
            method._layers = {}
            layers[layer] = method
        return layers[layer]

    def window_problem(self) -> str | None:
        """Why these options cannot keep a model trained on rope.train_length tokens within the
        distances it saw (a remapping window at or past that length), in the spec's terms; None
        when they can. Frequency methods have no window: None."""
        return None

    # ---- entry points for callers --------------------------------------------------------------
    def params(self, seq_len: int, device=None) -> tuple[torch.Tensor, float]:
        """rope_params, cached (one entry: the frequencies of the last length and device)."""
        key = (seq_len if self.length_dependent else None, str(torch.device(device or "cpu")))
        if self._params_cache is None or self._params_cache[0] != key:
            inv_freq, factor = self.rope_params(seq_len, device)
            self._params_cache = (key, (keep_highest_frequencies(inv_freq, self.rope.fraction), factor))
        return self._params_cache[1]

    def rotate_qk(self, q, k, pos_q, pos_k, seq_len: int | None = None):
        """q, k rotated by their positions (HF convention: cos and sin times attention_factor) and
        q multiplied by the query scale: plain causal SDPA on them equals `attend`."""
        if self.remaps:
            raise LengenError(f"method {self} remaps positions: call attend(), not rotate_qk()")
        inv_freq, factor = self.params(seq_len or sequence_length(pos_q, pos_k), q.device)
        q = apply_rotary(q, *rope_cos_sin(pos_q, inv_freq, factor))
        k = apply_rotary(k, *rope_cos_sin(pos_k, inv_freq, factor))
        qs = self.query_scale(pos_q)
        return (q if qs is None else q * qs.to(q.dtype)), k

    def attend(self, q, k, v, pos_q, pos_k, scale: float | None = None, seq_len: int | None = None):
        """Causal attention (key pos <= query pos) from UN-rotated q [B,H,Tq,d], k, v [B,Hk,Tk,d]
        (Hk divides H: grouped-query attention), positions pos_q [B|1,Tq], pos_k [B|1,Tk].
        scale defaults to 1/sqrt(d); seq_len (for length-dependent frequencies) to max(pos)+1."""
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        seq_len = seq_len or sequence_length(pos_q, pos_k)
        q, k, v = attention_dtype(q, k, v)
        if not self.remaps:
            q, k = self.rotate_qk(q, k, pos_q, pos_k, seq_len)
            return causal_attention(q, k, v, pos_q, pos_k, scale)
        inv_freq, factor = self.params(seq_len, q.device)
        qs = self.query_scale(pos_q)
        if qs is not None:
            q = q * qs.to(q.dtype)
        # k, v keep their Hk heads: the Triton kernel reads them per head group, the other paths repeat
        return self.attention(q, k, v, pos_q, pos_k, inv_freq, factor, scale)

    def __str__(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.name}:{opts}" if opts else self.name

    __repr__ = __str__


def option_names(cls) -> list[str]:
    """Keyword options of cls.__init__ and of the base classes it forwards **options to."""
    names = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names += [p.name for p in params
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("self", "rope")]
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return list(dict.fromkeys(names))


def sequence_lengths(pos_k: torch.Tensor) -> torch.Tensor:
    """Per sequence [B|1], the length length-dependent frequencies (dynamic NTK) are chosen for,
    as transformers does: the largest key position + 1 (the keys include every query, so this is
    the length of the whole sequence so far; floored for float positions)."""
    return pos_k.amax(-1).floor().long() + 1


def sequence_length(pos_q: torch.Tensor, pos_k: torch.Tensor) -> int:
    """The one length for a batch: the longest of `sequence_lengths` (queries counted too)."""
    return int(max(sequence_lengths(pos_q).max(), sequence_lengths(pos_k).max()))



def causal_mask(pos_q: torch.Tensor, pos_k: torch.Tensor) -> torch.Tensor:
    """[B|1, 1, Tq, Tk] bool: key position <= query position."""
    return (pos_k[:, None, None, :] <= pos_q[:, None, :, None])


def causal_attention(q, k, v, pos_q, pos_k, scale: float) -> torch.Tensor:
    """SDPA of rotated q, k with causality by position. Uses the fused is_causal path when the
    queries are the keys at strictly increasing positions (ordinary prefill)."""
    gqa = k.shape[1] != q.shape[1]
    if q.shape[-2] == k.shape[-2] and same_increasing(pos_q, pos_k):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    mask = causal_mask(pos_q.to(q.device), pos_k.to(q.device))
    if bool(mask.all()):
        mask = None  # e.g. decoding one token against its whole cache
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


def same_increasing(pos_q: torch.Tensor, pos_k: torch.Tensor) -> bool:
    if pos_q is not pos_k and (pos_q.shape != pos_k.shape or not torch.equal(pos_q, pos_k)):
        return False
    return pos_q.shape[-1] < 2 or bool((pos_q[..., 1:] > pos_q[..., :-1]).all())
