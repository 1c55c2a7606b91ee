"""Blockwise causal attention with a two-piece relative position, without a T x T matrix.

The remapping methods (ReRoPE, Leaky ReRoPE, Self-Extend, Lambda-mask / sinks) all score a pair
(query i, key j) at distance delta = p_i - p_j in one of two ways:

  near   0 <= delta < window            q rotated by p_i,      k rotated by p_j (ordinary RoPE)
  far    delta >= window (and the key   q rotated by f_q(p_i), k rotated by f_k(p_j)
         is allowed from afar)          (relative position f_q(p_i) - f_k(p_j))
  masked otherwise (delta < 0: causal; far keys not allowed: the Lambda-mask)

RoPE expresses a relative position only through one rotation per token, so a naive version
computes two full score matrices and selects. Here the pairs are split into *pieces*, each one
attention call returning its output and log-sum-exp, merged exactly (lengen.kernels.lse_attention).

Banded path (contiguous positions: keys c..c+Tk-1, queries the last Tq of them; prefill, chunked
prefill and decoding). Query row r is key index p0 + r (p0 = Tk - Tq):
  far   keys j <= p0 + r - w: one unmasked call over the keys every row sees, plus ONE top-left
        causal call (queries against keys shifted by w), the kernel skipping the masked half;
  near  keys p0 + r - w < j <= p0 + r: a band, one call per query block with one shared mask.
Work: the causal T^2/2 plus T * block for the band's corners. Memory: O(T d + block (block + w)).

General path (any positions, e.g. randomized or per-batch): query blocks x key blocks classified
by their position ranges (entirely near, entirely far, mixed, or empty); consecutive key blocks of
one kind are one unmasked piece, only mixed ones get an elementwise mask. Memory O(T d + block T).

Pieces run through torch's fused CPU flash kernel where it applies, else matmul + softmax
(lengen.kernels.lse_attention).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lengen.kernels.lse_attention import (accumulation_dtype, attention_with_lse, fused_applies,
                                          fused_with_lse, merge)

NONE, MASKED, FULL = 0, 1, 2  # how a key block relates to a query block, per score kind


def two_piece_attention(
    q_near, k_near, q_far, k_far, v, pos_q, pos_k, window: int, scale: float,
    far_keys: torch.Tensor | None = None, block: int = 256,
) -> torch.Tensor:
    """Causal attention where a pair scores q_near.k_near if 0 <= p_i - p_j < window, q_far.k_far
    if p_i - p_j >= window and far_keys[j] (default: every key), and is masked otherwise.

    q_* [B,H,Tq,d]; k_*, v [B,H,Tk,d]; pos_q [B|1,Tq]; pos_k [B|1,Tk]; far_keys [B|1,Tk] bool.
    Contiguous positions (keys c, c+1, ..., queries the last Tq of them: prefill, chunked prefill,
    decoding) take the banded path; any other positions the general blockwise path."""
    pk, pq = pos_k.detach().cpu(), pos_q.detach().cpu()
    fk = None if far_keys is None else far_keys.detach().cpu()
    offset = _contiguous_offset(pq, pk)
    n_far = _prefix_length(fk, pk.shape[-1])
    args = (q_near, k_near, q_far, k_far, v)
    if offset is not None and n_far is not None and float(window).is_integer():
        return _banded(*args, offset, int(window), scale, n_far, block)
    return _general(*args, pq, pk, fk, window, scale, block)


def window_attention(q, k, v, window: int, scale: float, block: int = 256) -> torch.Tensor:
    """Sliding-window causal attention: keys contiguous, queries the last Tq of them, query row r
    (key index p0 + r, p0 = Tk - Tq) sees keys p0 + r - window < j <= p0 + r (Gemma's and
    Mistral's "distance < window"). q [B,H,Tq,d]; k, v [B,H,Tk,d]. The band path of
    `two_piece_attention` with no far keys: work O(Tq (window + block)), memory O(T d + block
    (block + window)), no Tq x Tk matrix."""
    return _banded(q, k, None, None, v, k.shape[-2] - q.shape[-2], int(window), scale, 0, block)


# ---- banded path: contiguous positions ---------------------------------------------------------
def _banded(q_near, k_near, q_far, k_far, v, p0, w, scale, n_far, block):
    """Query row r sits at key index p0 + r. Far keys j <= p0 + r - w (and j < n_far) are one
    unmasked call over the keys every row sees plus one top-left causal call; near keys
    p0 + r - w < j <= p0 + r are a band, one masked call per query block (mask shared)."""
    B, H, Tq, d = q_near.shape
    Tk = k_near.shape[-2]
    far_o = q_near.new_zeros(B, H, Tq, v.shape[-1])
    far_lse = torch.full((B, H, Tq), float("-inf"), dtype=accumulation_dtype(q_near.dtype), device=q_near.device)
    seen_by_all = max(0, p0 - w)             # keys [0, seen_by_all): far for every row
    first_row = max(0, w - p0)               # rows before it have no far key
    k_hi = min(Tk - w, n_far)                # keys far for the last row
    pieces = []
    if min(seen_by_all, n_far) > 0:
        a = min(seen_by_all, n_far)
        pieces.append(attention_with_lse(q_far, k_far[:, :, :a], v[:, :, :a], scale))
    if first_row < Tq and k_hi > seen_by_all:
        # row first_row + t sees keys seen_by_all .. seen_by_all + t: top-left causal alignment
        rows = slice(first_row, Tq)
        o, lse = _causal_with_lse(q_far[:, :, rows], k_far[:, :, seen_by_all:k_hi],
                                  v[:, :, seen_by_all:k_hi], scale, block)
        if pieces:  # seen_by_all > 0 means first_row == 0: both pieces cover every row
            pieces.append((o, lse))
        else:
            far_o[:, :, rows], far_lse[:, :, rows] = o, lse
    if pieces:
        far_o, far_lse = merge(pieces, q_near.dtype)
    out = torch.empty_like(q_near)
    masks: dict = {}
    for s in range(0, Tq, block):
        e = min(s + block, Tq)
        k0, k1 = max(0, p0 + s - w + 1), p0 + e
        mask = _band_mask(masks, p0 + s - k0, e - s, k1 - k0, w, q_near.dtype, q_near.device)
        near = _fused_or_matmul(q_near[:, :, s:e], k_near[:, :, k0:k1], v[:, :, k0:k1], scale, mask)
        if n_far == 0:   # a plain sliding window: the band is every key a row sees
            out[:, :, s:e] = near[0]
        else:
            out[:, :, s:e] = merge([near, (far_o[:, :, s:e], far_lse[:, :, s:e])], q_near.dtype)[0]
    return out


def _band_mask(cache, shift, rows, cols, w, dtype, device):
    """Additive mask: row t (key index shift + t within the block) sees columns c with
    shift + t - w < c <= shift + t. Full blocks share one mask (same shift and shape)."""
    key = (shift, rows, cols)
    if key not in cache:
        t = torch.arange(rows, device=device)[:, None] + shift
        c = torch.arange(cols, device=device)[None, :]
        allowed = (c <= t) & (c > t - w)
        additive = torch.zeros(rows, cols, dtype=dtype, device=device).masked_fill_(~allowed, float("-inf"))
        cache[key] = (allowed, additive)
    return cache[key]


def _causal_with_lse(q, k, v, scale, block):
    """Top-left causal attention (row t sees keys 0..t) with its log-sum-exp. Without the fused
    kernel: per row block, the keys before it unmasked plus a small triangular mask."""
    if fused_applies(q):
        return fused_with_lse(q, k, v, scale, causal=True)
    Tq, Tk = q.shape[-2], k.shape[-2]
    outs = []
    for s in range(0, Tq, block):
        e = min(s + block, Tq)
        pieces = []
        if min(s, Tk) > 0:
            a = min(s, Tk)
            pieces.append(attention_with_lse(q[:, :, s:e], k[:, :, :a], v[:, :, :a], scale))
        if s < Tk:
            k1 = min(e, Tk)
            rows, cols = torch.arange(e - s, device=q.device), torch.arange(k1 - s, device=q.device)
            tri = cols[None, :] <= rows[:, None]
            pieces.append(attention_with_lse(q[:, :, s:e], k[:, :, s:k1], v[:, :, s:k1], scale, tri))
        outs.append(merge(pieces, q.dtype))
    return torch.cat([o for o, _ in outs], dim=-2), torch.cat([l for _, l in outs], dim=-1)


def _fused_or_matmul(q, k, v, scale, mask):
    allowed, additive = mask
    if fused_applies(q):   # every row of a band sees at least its own key: no empty row
        return fused_with_lse(q, k, v, scale, additive=additive)
    return attention_with_lse(q, k, v, scale, allowed)


def _contiguous_offset(pq, pk):
    """p0 if every batch row has keys c, c+1, ..., c+Tk-1 and queries = the last Tq keys."""
    Tk, Tq = pk.shape[-1], pq.shape[-1]
    if Tq > Tk or pq.shape[0] not in (1, pk.shape[0]):
        return None
    if pk.dtype.is_floating_point:
        if not bool((pk == pk.round()).all()):
            return None
        pk = pk.long()
    ramp = pk[..., :1] + torch.arange(Tk)
    if not (torch.equal(pk, ramp) and bool((pk == pk[:1]).all())):
        return None
    return Tk - Tq if bool((pq == pk[..., Tk - Tq:]).all()) else None


def _prefix_length(far_keys, Tk):
    """n if far_keys (shared by the batch) is True exactly on the first n keys; Tk if None."""
    if far_keys is None:
        return Tk
    if not bool((far_keys == far_keys[:1]).all()):
        return None
    row = far_keys[0]
    n = int(row.sum())
    return n if bool(row[:n].all()) else None


# ---- general path: any positions -----------------------------------------------------------------
def _general(q_near, k_near, q_far, k_far, v, pq, pk, fk, window, scale, block):
    """Query blocks x key blocks classified from their position ranges; consecutive key blocks of
    one kind form a piece; only mixed blocks get an elementwise mask."""
    Tq = q_near.shape[-2]
    dev = q_near.device
    pos_q64, pos_k64 = pq.to(dev, torch.float64), pk.to(dev, torch.float64)
    far_dev = None if fk is None else fk.to(dev)
    q = {"near": q_near, "far": q_far}
    k = {"near": k_near, "far": k_far}
    key_blocks = _key_blocks(pk.double(), fk, block)
    q_ranges = _block_range(pq.double(), block)
    out = torch.empty_like(q_near)
    for qb, s in enumerate(range(0, Tq, block)):
        e = min(s + block, Tq)
        pieces = []
        for kind, a, z, near_any, far_any in _runs(*q_ranges[qb], key_blocks, window):
            masks = {kind: None}  # an entirely near or far run
            if kind == "mixed":
                delta = pos_q64[:, None, s:e, None] - pos_k64[:, None, None, a:z]
                masks = {}
                if near_any:
                    masks["near"] = (delta >= 0) & (delta < window)
                if far_any:
                    masks["far"] = delta >= window
                    if far_dev is not None:
                        masks["far"] &= far_dev[:, None, None, a:z]
            for part, mask in masks.items():
                qk = q[part][:, :, s:e], k[part][:, :, a:z]
                pieces.append(attention_with_lse(*qk, v[:, :, a:z], scale, mask))
        out[:, :, s:e] = merge(pieces, out.dtype)[0] if pieces else 0
    return out


def _block_range(pos, b):
    """[(min, max)] of positions per block of b (over the batch too)."""
    T = pos.shape[-1]
    pad = -T % b
    lo = F.pad(pos, (0, pad), value=float("inf")).view(pos.shape[0], -1, b).amin(dim=(0, 2))
    hi = F.pad(pos, (0, pad), value=float("-inf")).view(pos.shape[0], -1, b).amax(dim=(0, 2))
    return list(zip(lo.tolist(), hi.tolist()))


def _key_blocks(pk, fk, b):
    """Per key block: (start, end, min pos, max pos, far status)."""
    T = pk.shape[-1]
    n = -(-T // b)
    if fk is None:
        far = [FULL] * n
    else:
        pad = -T % b
        anys = F.pad(fk, (0, pad), value=False).view(fk.shape[0], -1, b).any(2).any(0).tolist()
        alls = F.pad(fk, (0, pad), value=True).view(fk.shape[0], -1, b).all(2).all(0).tolist()
        far = [FULL if al else (MASKED if an else NONE) for an, al in zip(anys, alls)]
    ranges = _block_range(pk, b)
    return [(i * b, min(i * b + b, T), lo, hi, f) for i, ((lo, hi), f) in enumerate(zip(ranges, far))]


def _runs(q_min, q_max, key_blocks, window):
    """Classify key blocks against a query block and join adjacent blocks of the same kind:
    [kind, start, end, near_any, far_any], kind "near" / "far" (no mask needed) or "mixed"."""
    runs = []
    for start, end, k_min, k_max, far_status in key_blocks:
        d_min, d_max = q_min - k_max, q_max - k_min
        near = NONE if d_max < 0 or d_min >= window else (
            FULL if d_min >= 0 and d_max < window else MASKED)
        far = NONE if d_max < window or far_status == NONE else (
            FULL if d_min >= window and far_status == FULL else MASKED)
        if near == NONE and far == NONE:
            continue
        kind = "near" if far == NONE and near == FULL else "far" if near == NONE and far == FULL else "mixed"
        last = runs[-1] if runs else None
        if last and last[0] == kind and last[2] == start:
            last[2] = end
            last[3] |= near != NONE
            last[4] |= far != NONE
        else:
            runs.append([kind, start, end, near != NONE, far != NONE])
    return runs
