"""Attention that also returns its log-sum-exp, and the exact merge of such pieces.

Blockwise attention (lengen.extrapolation.blockwise, the remapping methods, DCA) and the
FlexAttention path (lengen.kernels.flex_remap) split the pairs (query, key) into pieces, each one
attention call returning its output o and log-sum-exp lse, and merge them exactly:

  lse = logsumexp_p lse_p,   o = sum_p exp(lse_p - lse) o_p.

On the CPU a piece runs through torch's fused flash kernel, which returns the log-sum-exp
(`aten._scaled_dot_product_flash_attention_for_cpu`: not a public API, looked up at import);
elsewhere, or with USE_FUSED = False, through matmul + softmax in key chunks.
"""

from __future__ import annotations

import torch

# Fused CPU kernel that returns (output, logsumexp); None when this torch lacks it.
try:
    _FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
except (AttributeError, RuntimeError):  # pragma: no cover - older or stripped torch builds
    _FLASH_CPU = None
USE_FUSED = True       # tests switch this off to check the matmul path
KEY_CHUNK = 2048       # key chunk of the matmul path: memory [B, H, block_q, KEY_CHUNK]


def accumulation_dtype(dtype):
    """Accumulation dtype: float32 for half types, else the input's (float64 stays float64)."""
    return torch.promote_types(dtype, torch.float32)


def fused_applies(q: torch.Tensor) -> bool:
    """Whether q's attention runs through the fused CPU kernel (read at call time: tests patch it)."""
    return USE_FUSED and _FLASH_CPU is not None and q.device.type == "cpu"


def fused_with_lse(q, k, v, scale: float, causal: bool = False, additive: torch.Tensor | None = None):
    """The fused CPU kernel: (o, lse in the accumulation dtype); `causal` is top-left, `additive`
    a float mask (-inf = masked). The kernel reports lse = 0 for a row with no allowed key."""
    o, lse = _FLASH_CPU(q, k, v, 0.0, causal, attn_mask=additive, scale=scale)
    return o, lse.to(accumulation_dtype(q.dtype))


def attention_with_lse(q, k, v, scale: float, mask: torch.Tensor | None = None):
    """Softmax attention of q [B,H,Tq,d] over k, v [B,H,S,d] with an optional bool mask
    [B|1,1,Tq,S] (True = attend). Returns (o [B,H,Tq,d], lse [B,H,Tq] float32, or float64 for
    float64 inputs); rows without any allowed key give o = 0, lse = -inf."""
    if fused_applies(q):
        additive = None
        if mask is not None:
            additive = torch.zeros(mask.shape, dtype=q.dtype).masked_fill_(~mask, float("-inf"))
        o, lse = fused_with_lse(q, k, v, scale, additive=additive)
        if mask is not None:  # the kernel reports lse = 0 for fully masked rows
            lse = lse.masked_fill(~mask.any(-1), float("-inf"))
        return o, lse
    pieces = []
    for c in range(0, k.shape[-2], KEY_CHUNK):
        sub = None if mask is None else mask[..., c:c + KEY_CHUNK]
        keys = slice(c, c + KEY_CHUNK)
        pieces.append(_matmul_attention(q, k[..., keys, :], v[..., keys, :], scale, sub))
    return merge(pieces, q.dtype)


def _matmul_attention(q, k, v, scale, mask):
    acc = accumulation_dtype(q.dtype)
    s = torch.matmul(q.to(acc), k.to(acc).transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True)
    p = torch.exp(s - m.nan_to_num(neginf=0.0))  # rows with no key: exp(-inf) = 0
    l = p.sum(-1, keepdim=True)
    o = torch.matmul(p, v.to(acc)) / l.clamp_min(1e-30)
    return o.to(q.dtype), (m + l.log()).squeeze(-1)


def merge(pieces, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact softmax over the union of disjoint key sets from per-piece (o, lse)."""
    if len(pieces) == 1:
        return pieces[0]
    acc = accumulation_dtype(dtype)
    lse = torch.stack([p[1] for p in pieces])                 # [P, B, H, Tq]
    total = torch.logsumexp(lse, dim=0)
    weight = torch.exp(lse - total).nan_to_num(0.0)           # -inf - -inf rows: no key anywhere
    out = sum(w[..., None].to(acc) * o.to(acc) for w, (o, _) in zip(weight, pieces))
    return out.to(dtype), total
