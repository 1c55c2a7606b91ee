"""attn_implementation "lengen_banded": the model's sdpa attention, with sliding-window layers
computed band by band, so that no layer builds or reads a T x T matrix.

transformers' sdpa gives a sliding-window layer (Gemma 3, OLMo 3, SmolLM3 / Qwen3-MoE with
`use_sliding_window`; Gemma 2 soft-caps and runs eager, which this does not replace) a
materialized [B, 1, T, T] boolean mask once T exceeds the window, and the kernel then scores every
pair: for Gemma 3 270M at 131,072 tokens that is a 17 GB mask and 15 of its 18 layers doing full
T^2 work to keep 512 keys a row. Here the mask function answers such a layer with a `Band` marker
instead (only when the mask is exactly the plain sliding causal window: no padding, no custom mask
function), and the attention function computes the window with
`lengen.extrapolation.blockwise.window_attention`: work and memory O(T x window). Everything else
(global layers, padded batches, decoding against a cache) is transformers' own sdpa, except that
on CUDA in float32 a grouped-query layer gets its keys and values repeated to the query's heads
first (`gqa_falls_to_math`): transformers would otherwise send it to the math kernel, T x T again.

Use `use(model)` on a model loaded with attn_implementation="sdpa" (before lengen.hf.extend: an
extended model keeps the banded layers); `restore()` of an extension returns to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lengen.errors import LengenError
from lengen.extrapolation.base import repeat_kv
from lengen.extrapolation.blockwise import window_attention
from lengen.hf.extensions import extension_of

NAME = "lengen_banded"


@dataclass(frozen=True)
class Band:
    """What the mask function hands a sliding-window layer instead of a [B, 1, T, T] mask: keys
    contiguous, the queries the last of them, each query seeing the `window` keys up to itself.
    Not a tensor on purpose: code that would index a mask fails loudly instead of misreading it."""

    window: int


def _probe_is_sliding(mask_function, window: int, device) -> bool:
    """Whether `mask_function` is exactly the sliding causal window (kv > q - window and kv <= q)
    on rows around the window's edges (q = window - 1 .. 2 window + 1), against every key of 0..2
    window + 2: a chunked mask (Llama 4, same `local_size` argument) differs at q = window."""
    q = torch.tensor([0, window - 1, window, window + 1, 2 * window, 2 * window + 1], device=device)
    kv = torch.arange(2 * window + 3, device=device)
    zero = torch.zeros((), dtype=torch.long, device=device)
    got = mask_function(zero, zero, q[:, None], kv[None, :])
    want = (kv[None, :] <= q[:, None]) & (kv[None, :] > q[:, None] - window)
    return torch.is_tensor(got) and got.shape == want.shape and bool((got == want).all())


def _query_span(kwargs) -> tuple[int, int, object]:
    """(q_length, q_offset, device) of a mask call: transformers >= 5.2x passes q_length and
    q_offset, earlier 5.x releases the queries' cache_position."""
    positions = kwargs.get("cache_position")
    if positions is None:
        return int(kwargs["q_length"]), int(kwargs.get("q_offset", 0)), kwargs.get("device", "cpu")
    q_length = positions.shape[0]
    q_offset = int(positions[0])
    if q_length and int(positions[-1]) - q_offset != q_length - 1:
        return q_length, None, positions.device   # not contiguous: never a band
    return q_length, q_offset, positions.device


def banded_mask(**kwargs):
    """transformers' sdpa mask, except a `Band` for a plain sliding-window layer longer than its
    window (the AttentionMaskInterface call, made with keyword arguments)."""
    from transformers.masking_utils import (causal_mask_function, prepare_padding_mask,  # optional
                                            sdpa_mask)

    window, kv_length = kwargs.get("local_size"), int(kwargs["kv_length"])
    kv_offset = int(kwargs.get("kv_offset", 0))
    if window is not None and kv_length > window and kwargs.get("allow_is_causal_skip", True) \
            and not kwargs.get("use_vmap", False):
        q_length, q_offset, device = _query_span(kwargs)
        padding = prepare_padding_mask(kwargs.get("attention_mask"), kv_length, kv_offset)
        if q_offset is not None and q_offset + q_length == kv_offset + kv_length \
                and (padding is None or bool(padding.all())) and _probe_is_sliding(
                    kwargs.get("mask_function") or causal_mask_function, int(window), device):
            return Band(int(window))
    return sdpa_mask(**kwargs)


def gqa_falls_to_math(device_type: str, dtype: torch.dtype, heads: int, kv_heads: int) -> bool:
    """Whether transformers' sdpa would run a grouped-query layer on PyTorch's math kernel,
    which scores all [B, H, Tq, Tk] pairs in memory: on CUDA in float32, where only the math
    kernel takes `enable_gqa` (flash needs fp16/bf16; the memory-efficient kernel takes float32
    but not `enable_gqa`), and transformers passes it whenever no mask is given (5.17 - 5.24).
    At 65,536 tokens Gemma 3 270M's global layers asked for 64 GiB (H200, 2026-11-28). Keys and
    values repeated to the query's heads go to the memory-efficient kernel instead."""
    return device_type == "cuda" and dtype == torch.float32 and kv_heads != heads


def banded_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                     **kwargs):
    """transformers' sdpa attention, except a `Band` mask: the window computed in bands
    (AttentionInterface signature: query [B,H,Tq,d], key/value [B,Hkv,Tk,d] -> [B,Tq,H,d])."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward   # optional

    if not isinstance(attention_mask, Band):
        if gqa_falls_to_math(query.device.type, query.dtype, query.shape[1], key.shape[1]):
            heads = query.shape[1]
            key, value = repeat_kv(key, heads), repeat_kv(value, heads)
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    if dropout:
        raise LengenError("lengen_banded attention is for inference: dropout must be 0 (call "
                          "model.eval())")
    if kwargs.get("softcap") is not None:
        raise LengenError("lengen_banded attention has no logit soft-capping (Gemma 2): load the "
                          "model with attn_implementation='eager'")
    window = kwargs.get("sliding_window")
    if window is not None and int(window) != attention_mask.window:
        raise LengenError(f"layer {getattr(module, 'layer_idx', '?')}: its sliding window "
                          f"({window}) differs from its mask's ({attention_mask.window})")
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    heads = query.shape[1]
    out = window_attention(query, repeat_kv(key, heads), repeat_kv(value, heads),
                           attention_mask.window, scale)
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Register "lengen_banded" with transformers' attention and mask interfaces (idempotent)."""
    from transformers import AttentionInterface   # optional (lengen[hf]): imported on use
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, banded_attention)
    AttentionMaskInterface.register(NAME, banded_mask)


def use(model) -> None:
    """Switch a model loaded with attn_implementation="sdpa" to "lengen_banded", in place."""
    if extension_of(model) is not None:
        raise LengenError("call lengen.hf.banded.use(model) before lengen.hf.extend(model)")
    current = getattr(model.config, "_attn_implementation", None)
    if current == NAME:
        return
    if current != "sdpa":
        raise LengenError(f"lengen_banded replaces sdpa attention; the model uses {current!r}: "
                          "load it with attn_implementation='sdpa'")
    register()
    model.set_attn_implementation(NAME)
    if model.config._attn_implementation != NAME:
        raise LengenError(f"{type(model).__name__} refused attn_implementation {NAME!r}")
