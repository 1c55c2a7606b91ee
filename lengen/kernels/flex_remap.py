"""Two-pass FlexAttention for the remapping methods (ReRoPE, Leaky ReRoPE, Self-Extend, Lambda /
sinks, STRING, Dual Chunk Attention).

Every remapping method scores a causal pair (query i, key j) in one of two ways:

  near   q rotated by its true position p_i, k by p_j        (ordinary RoPE)
  far    q rotated by f_q(p_i), k by f_k(p_j)                 (the remapped relative position)
  masked neither (j after i; the Lambda-mask's non-global keys beyond the window)

A method describes this by a `TwoPiece` (its `flex_pieces` hook): the four rotated tensors, the
logit scale, the positions and two predicates near(p_i, p_j, b, j) / far(p_i, p_j, b, j). Here

  pass 1 = flex_attention(q_near, k_near, v, block_mask = causal & near)
  pass 2 = flex_attention(q_far,  k_far,  v, block_mask = causal & far)

each returning its log-sum-exp, merged exactly (`lengen.kernels.lse_attention.merge`: rows where
a pass has no key have lse = -inf and weight 0). `create_block_mask` keeps, per pass, only the
(128 x 128) blocks with an allowed pair, so the two passes together touch about the blocks of one
causal attention (plus the blocks the near band's edge crosses, which both passes visit). fp16 /
bf16 inputs are accumulated in float32 by the kernel; the merge is float32.

When it runs (`mode()`, env LENGEN_FLEX_REMAP):
  "auto" (default)  on CUDA tensors when torch has FlexAttention; there flex_attention and
                    create_block_mask are compiled (torch.compile, Triton). If a call fails, the
                    reason is logged once and the methods' blockwise path is used from then on.
  "force" (1/on)    on any device, errors raised: on CPU it runs *eager* flex_attention, which
                    materializes each pass's full score matrix (for testing the math only: it is
                    neither fast nor memory-linear). torch 2.13's inductor CPU backend compiles
                    flex_attention for inference but refuses the log-sum-exp this needs.
  "off" (0)         never: the blockwise path everywhere.
The CPU default is unchanged: the blockwise path with torch's fused CPU flash kernel.

Ahead of the flex passes comes the one-pass Triton kernel (lengen.kernels.triton_remap) for
methods with a `kernel_rule`: `choose(method, q, ...)` is the one place the path is picked, by
device ("triton", then "flex", then the method's blockwise path). Its mode (`triton_mode()`,
env LENGEN_TRITON_REMAP) reads like flex's: "auto" on CUDA tensors when triton is installed and
no gradient is needed (the kernel is forward only), giving up (logged once) for flex if a call
fails; "force" on any device, errors raised (on CPU only under TRITON_INTERPRET=1: the tests);
"off" never. Triton is imported only when the kernel runs.

Block masks depend only on the positions and the method, so one forward's layers share them: the
last set is cached, keyed on the position tensors' identity and version and the method.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import torch

from lengen.kernels.heads import repeat_kv
from lengen.kernels.lse_attention import merge

log = logging.getLogger("lengen.kernels")

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:  # pragma: no cover - torch without FlexAttention
    create_block_mask = flex_attention = None
try:  # torch >= 2.9 spells the log-sum-exp request return_aux=AuxRequest(lse=True)
    from torch.nn.attention.flex_attention import AuxRequest
except ImportError:  # pragma: no cover
    AuxRequest = None

MODES = ("auto", "force", "off")
BLOCK_SIZE = 128


def _mode_from_env(variable: str = "LENGEN_FLEX_REMAP") -> str:
    value = os.environ.get(variable, "auto").strip().lower()
    if value in ("1", "on", "true", "yes", "force"):
        return "force"
    if value in ("0", "off", "false", "no"):
        return "off"
    return "auto"


_mode = _mode_from_env()
_failed: str | None = None          # auto mode: the reason flex was given up, once it failed
_triton_mode = _mode_from_env("LENGEN_TRITON_REMAP")
_triton_failed: str | None = None   # auto mode: the reason the Triton kernel was given up
_compiled: dict = {}
#: block masks of the last few (method, positions): a model's layers share one, and methods or
#: layer types that alternate (a benchmark's interleaved rounds, Gemma's sliding and global
#: layers) would otherwise rebuild theirs at every call: at 128k a pair of masks is ~16 MB
_mask_cache: OrderedDict = OrderedDict()
MASK_CACHE_SIZE = 4


def _checked_mode(value: str) -> str:
    if value not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {value!r}")
    return value


def set_mode(value: str) -> None:
    """"auto" (CUDA only), "force" (any device, errors raised) or "off"."""
    global _mode, _failed
    _mode, _failed = _checked_mode(value), None


def mode() -> str:
    return _mode


def available() -> bool:
    """True when this torch has FlexAttention."""
    return flex_attention is not None


def applies(q: torch.Tensor) -> bool:
    """Whether the methods' attention should go through the two flex passes for this q."""
    if not available() or _mode == "off":
        return False
    if _mode == "force":
        return True
    return q.is_cuda and _failed is None


@dataclass
class TwoPiece:
    """What a remapping method hands the two passes. Tensors [B, H, T*, d] (k, v already repeated
    to q's heads); positions [B|1, T*]; key_extra: an optional per-key value [B|1, Tk] (e.g. the
    Lambda-mask's far-key flag, DCA's threshold); near / far: (p_i, p_j, x_j) -> bool, elementwise,
    x_j = key_extra at the key (None without it). They are traced by FlexAttention: torch ops only,
    and no Python value that depends on the length (it would recompile per length). `near` must
    imply p_j <= p_i; `far` must be False where p_j > p_i; never both True."""

    q_near: torch.Tensor
    k_near: torch.Tensor
    q_far: torch.Tensor
    k_far: torch.Tensor
    scale: float
    pos_q: torch.Tensor
    pos_k: torch.Tensor
    near: Callable
    far: Callable
    key: tuple = ()     # hashable description of the predicates (method and its options)
    key_extra: torch.Tensor | None = None


def attend(pieces: TwoPiece, v: torch.Tensor) -> torch.Tensor:
    """The merged two-pass attention [B, H, Tq, dv]."""
    near_mask, far_mask = block_masks(pieces)
    outs = [_flex(pieces.q_near, pieces.k_near, v, near_mask, pieces.scale)]
    if far_mask is not None:
        outs.append(_flex(pieces.q_far, pieces.k_far, v, far_mask, pieces.scale))
    return merge(outs, pieces.q_near.dtype)[0]


def set_triton_mode(value: str) -> None:
    """The Triton kernel's mode: "auto" (CUDA only), "force" (any device, errors raised) or "off"."""
    global _triton_mode, _triton_failed
    _triton_mode, _triton_failed = _checked_mode(value), None


def triton_mode() -> str:
    return _triton_mode


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    """True when the triton package is installed (not imported here; looked up once)."""
    return importlib.util.find_spec("triton") is not None


def choose(method, q, k=None, v=None) -> str:
    """The path of a remapping method's attention for these tensors: "triton" (the one-pass
    kernel: the method has a `kernel_rule`, and the Triton mode allows it on q's device, with no
    gradient needed in auto mode), else "flex" (`applies(q)`), else "blockwise" (the method's
    own CPU path)."""
    if _triton_mode != "off" and _kernel_rule_of(method) is not None:
        if _triton_mode == "force":
            return "triton"
        needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v))
        if q.is_cuda and _triton_failed is None and not needs_grad and triton_available():
            return "triton"
    return "flex" if applies(q) else "blockwise"


def _kernel_rule_of(method):
    rule = getattr(method, "remap_rule", None)
    return None if rule is None else rule()


def attend_method(method, q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale) -> torch.Tensor | None:
    """A remapping method's attention on the path `choose` picks: the Triton kernel
    (`method.kernel_rule`), the flex passes (`method.flex_pieces`), or None: the method's own
    blockwise path then runs (also when a path failed in auto mode). k, v [B, Hk, Tk, d] with Hk
    dividing q's heads (grouped-query: the kernel reads them per group, flex gets them repeated)."""
    path = choose(method, q, k, v)
    if path == "triton":
        out = _try_triton(method, q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale)
        if out is not None:
            return out
        path = "flex" if applies(q) else "blockwise"
    if path != "flex":
        return None
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])  # flex_pieces takes k, v at q's heads
    return try_attend(lambda: method.flex_pieces(q, k, pos_q, pos_k, inv_freq, attention_factor, scale), v)


def _try_triton(method, q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale):
    """The kernel's output; in auto mode None (and the kernel given up, reason logged) if it fails."""
    global _triton_failed
    try:
        from lengen.kernels import triton_remap  # optional: triton is the `gpu` extra

        rule, logit_scale = method.kernel_rule(pos_q, pos_k, attention_factor, scale)
        prefix = triton_remap.queries_are_last_keys(pos_q, pos_k)
        pairs = getattr(method, "kernel_pair_groups", None)   # Dpe only (DualChunk has no RemapMethod base)
        return triton_remap.remap_attention(q, k, v, pos_q, pos_k, inv_freq, rule, logit_scale,
                                            causal_prefix=prefix,
                                            pair_groups=pairs(q.shape[1], q.device) if pairs else None)[0]
    except Exception as e:  # noqa: BLE001 - any import / compile / launch failure: fall back
        if _triton_mode == "force":
            raise
        _triton_failed = f"{type(e).__name__}: {e}"
        log.warning("the Triton kernel for the remapping methods failed, using %s: %s",
                    "flex" if applies(q) else "the blockwise path", _triton_failed.splitlines()[0][:500])
        return None


def try_attend(build: Callable[[], TwoPiece], v: torch.Tensor) -> torch.Tensor | None:
    """attend(build(), v); in auto mode None (and flex given up, reason logged) if it fails."""
    global _failed
    if _mode == "force":
        return attend(build(), v)
    try:
        return attend(build(), v)
    except Exception as e:  # noqa: BLE001 - any compile / kernel failure: fall back
        _failed = f"{type(e).__name__}: {e}"
        log.warning("flex attention for the remapping methods failed, using the blockwise path: %s",
                    _failed.splitlines()[0][:500])
        return None


def block_masks(pieces: TwoPiece):
    """(near BlockMask, far BlockMask or None when no pair is far), cached for the last few
    (method, positions) pairs (MASK_CACHE_SIZE)."""
    pq, pk = pieces.pos_q, pieces.pos_k
    key = (pieces.key, id(pq), _version(pq), tuple(pq.shape), id(pk), _version(pk), tuple(pk.shape),
           str(pieces.q_near.device))
    hit = _mask_cache.get(key)
    if hit is not None:
        _mask_cache.move_to_end(key)
        return hit[0]
    masks = _build_block_masks(pieces)
    _mask_cache[key] = (masks, pq, pk)  # holds the tensors: their ids stay unique while cached
    while len(_mask_cache) > MASK_CACHE_SIZE:
        _mask_cache.popitem(last=False)
    return masks


def clear_mask_cache() -> None:
    """Forget every cached block mask (a benchmark timing what a forward's first layer pays)."""
    _mask_cache.clear()


def _version(t: torch.Tensor):
    """The tensor's in-place version; None for an inference tensor (torch.inference_mode), which
    has no version counter (reading it raised on an H100, 2026-11-27): its identity alone keys it."""
    return None if t.is_inference() else t._version


def _padded(x: torch.Tensor, B: int) -> torch.Tensor:
    """[B, T] -> [B, ceil(T / BLOCK_SIZE) * BLOCK_SIZE], the last value repeated: the fused kernels
    may evaluate a mask past the end of a partial block (their result is discarded there)."""
    x = x.expand(B, -1)
    pad = -x.shape[-1] % BLOCK_SIZE
    return torch.cat([x, x[:, -1:].expand(B, pad)], -1).contiguous() if pad else x.contiguous()


def _build_block_masks(pieces: TwoPiece):
    dev = pieces.q_near.device
    Tq, Tk = pieces.q_near.shape[-2], pieces.k_near.shape[-2]
    extra = pieces.key_extra
    shared = (pieces.pos_q.shape[0] == 1 and pieces.pos_k.shape[0] == 1
              and (extra is None or extra.shape[0] == 1))
    Bq = pieces.q_near.shape[0]  # eager flex evaluates the mask for every batch row: index b
    pq = _padded(pieces.pos_q.detach().to(dev, torch.float64), Bq)
    pk = _padded(pieces.pos_k.detach().to(dev, torch.float64), Bq)
    xk = None if extra is None else _padded(extra.detach().to(dev, torch.float64), Bq)
    near_fn, far_fn = pieces.near, pieces.far

    if xk is None:
        def near_mod(b, h, qi, kj):
            return near_fn(pq[b, qi], pk[b, kj], None)

        def far_mod(b, h, qi, kj):
            return far_fn(pq[b, qi], pk[b, kj], None)
    else:
        def near_mod(b, h, qi, kj):
            return near_fn(pq[b, qi], pk[b, kj], xk[b, kj])

        def far_mod(b, h, qi, kj):
            return far_fn(pq[b, qi], pk[b, kj], xk[b, kj])

    B = None if shared else Bq
    build = block_mask_builder(compiled=dev.type == "cuda")  # eager materializes Tq x Tk booleans
    near = build(near_mod, B, None, Tq, Tk, device=dev, BLOCK_SIZE=BLOCK_SIZE)
    far = build(far_mod, B, None, Tq, Tk, device=dev, BLOCK_SIZE=BLOCK_SIZE)
    if not bool(far.kv_num_blocks.any()):
        far = None
    return near, far


def block_mask_builder(compiled: bool) -> Callable:
    """create_block_mask, or its compiled form: torch.compile(create_block_mask) from torch 2.6,
    which deprecates the `_compile=True` flag that torch 2.5 needs instead (it compiled the same
    function)."""
    if not compiled:
        return create_block_mask
    if torch.__version__ < (2, 6):   # TorchVersion compares with tuples
        return lambda *args, **kwargs: create_block_mask(*args, **kwargs, _compile=True)
    if "block_mask" not in _compiled:
        _compiled["block_mask"] = torch.compile(create_block_mask)
    return _compiled["block_mask"]


def _flex_fn(device: torch.device):
    if device.type != "cuda":
        return flex_attention
    if "cuda" not in _compiled:
        _compiled["cuda"] = torch.compile(flex_attention)
    return _compiled["cuda"]


def _flex(q, k, v, block_mask, scale):
    """(o, lse float32) of one pass; rows without an allowed key: o = 0, lse = -inf."""
    fn = _flex_fn(q.device)
    with warnings.catch_warnings():
        # eager CPU flex warns that it is unfused; return_lse's deprecation on some versions
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        if AuxRequest is not None:
            o, aux = fn(q, k, v, block_mask=block_mask, scale=scale, return_aux=AuxRequest(lse=True))
            lse = aux.lse
        else:  # pragma: no cover - torch < 2.9
            o, lse = fn(q, k, v, block_mask=block_mask, scale=scale, return_lse=True)
    lse = lse.float()
    # rows with no allowed key: make sure they carry no weight whatever the kernel reports
    return o, lse.masked_fill(torch.isnan(lse), float("-inf"))
