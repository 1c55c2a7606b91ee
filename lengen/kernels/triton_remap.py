"""One-pass Triton attention for the remapping methods (ReRoPE, Leaky ReRoPE, Self-Extend,
Lambda / sinks, STRING, Dual Chunk Attention, DPE): forward only, from UN-rotated q and k.

A flash-attention loop (online softmax, float32 accumulation) over key tiles, per query tile:
each (query tile, key tile) is classified from the tiles' position ranges by the method's
`RemapRule` (lengen.kernels.remap_tiles) as

  skipped     no causal pair: not computed
  near        no far pair: keys rotated by p_j, one dot product with q rotated by p_i
  far         no near pair: keys rotated by f_k(p_j), one dot product with q rotated by f_q(p_i)
  straddling  both dot products, the score chosen per element

so only the tiles on the near / far boundary pay twice. DPE's far positions are per head and
frequency pair (`pair_groups`), so its far q and k are rotated per channel. Keys are rotated in the kernel, once per
tile and kind, cos / sin from the frequencies (the half-split layout of lengen.encodings.rope,
rotary dim 2 len(inv_freq) <= head dim); the queries' two rotations once per program. Rotated
values are rounded to the input dtype before the dot, as `apply_rotary` does. Position
arithmetic (the near / far tests, f_q, f_k) is float64 like the methods' own; angles are
float32(position) x inv_freq, as `rope_cos_sin`. Causality is by position (p_j <= p_i).

Memory: the output, its log-sum-exp and, when decoding splits the keys (flash-decoding), one
float32 partial output per split: linear in the length, never Tq x Tk.

Shapes: q [B, H, Tq, d], k [B, Hkv, Tk, d], v [B, Hkv, Tk, dv] (Hkv divides H: grouped-query
attention without repeating k / v), positions [B|1, T*] (any dtype; per batch row or shared),
optional k_len [B] (keys at index >= k_len[b] ignored: padded batches). bf16 / fp16 / fp32.

Triton is imported at the top of this module: import it only where it is used (CUDA, or the
tests under TRITON_INTERPRET=1). The choice of this path is made in
lengen.kernels.flex_remap.choose.
"""

from __future__ import annotations

import functools
import math
import os

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from lengen.kernels.remap_tiles import K_MODES, RemapRule

LOG2E = 1.4426950408889634
TWO_PI = tl.constexpr(6.283185307179586)
INV_TWO_PI = tl.constexpr(0.15915494309189535)
LN2 = tl.constexpr(0.6931471805599453)
# where the float64 rule parameters sit in the PRM table (constexpr: read inside the kernel)
P_WINDOW, P_CHUNK, P_GROUP, P_QMUL, P_QADD, P_QMAX, P_NGLOBAL = (tl.constexpr(i) for i in range(7))
# tile classes, the order of the optional counts output
STRADDLING, NEAR, FAR, SKIPPED = (tl.constexpr(i) for i in range(4))
CLASSES = ("straddling", "near", "far", "skipped")


@triton.jit
def _h(p, group, FLOOR: tl.constexpr):
    x = p / group
    if FLOOR:
        x = tl.floor(x)
    return x


@triton.jit
def _far_q(p, PRM, FLOOR: tl.constexpr, HAS_QMAX: tl.constexpr):
    f = tl.load(PRM + P_QMUL) * _h(p, tl.load(PRM + P_GROUP), FLOOR) + tl.load(PRM + P_QADD)
    if HAS_QMAX:
        f = tl.minimum(f, tl.load(PRM + P_QMAX))
    return f


@triton.jit
def _far_k(p, PRM, FLOOR: tl.constexpr, K_MODE: tl.constexpr):
    if K_MODE == 2:  # p mod chunk
        s = tl.load(PRM + P_CHUNK)
        f = p - s * tl.floor(p / s)
    else:  # K_MODE 1 (mode 0, unrotated keys, never calls this)
        f = _h(p, tl.load(PRM + P_GROUP), FLOOR)
    return f


@triton.jit
def _rotate(x, xp, pos, freq, sgn, FAST_TRIG: tl.constexpr):
    """x rotated by pos (float64 [N, 1], or [N, BD]: a position per channel, DPE) in the
    half-split layout, float32; xp = x's rotate-half
    partner channels, sgn its sign (0 past the rotary dim, where freq = 0 leaves x as it is).
    The angle is rope_cos_sin's float32(pos) x inv_freq, reduced to [-pi, pi] in float64 (exact
    for that float32 value), so cos / sin never take CUDA's slow path for large arguments (past
    ~1e5 radians: position x frequency at 128k tokens) and FAST_TRIG may use the hardware's
    approximate sin / cos (absolute error ~1e-6 on [-pi, pi])."""
    ang = (pos.to(tl.float32) * freq[None, :]).to(tl.float64)
    r = (ang - TWO_PI * tl.floor(ang * INV_TWO_PI + 0.5)).to(tl.float32)
    if FAST_TRIG:
        c = libdevice.fast_cosf(r)
        s = libdevice.fast_sinf(r)
    else:
        c = tl.cos(r)
        s = tl.sin(r)
    return x * c + xp * sgn[None, :] * s


@triton.jit
def _pair_positions(p, groups, window, QUERY: tl.constexpr):
    """DPE's far positions per channel: [N, BD] float64 from positions p [N] and each channel's
    group size (its pair's; 0: a pair that keeps its true position): floor(p / s), plus
    W - W / s for queries, as lengen.extrapolation.dpe.Dpe.grouped_positions."""
    s = tl.where(groups > 0, groups, 1.0)[None, :]
    f = tl.floor(p[:, None] / s)
    if QUERY:
        f = f + (window - window / s)
    return tl.where(groups[None, :] > 0, f, p[:, None])


@triton.jit
def _dot(a, b, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    """a @ b accumulated in float32: "ieee" for float32 inputs (no TF32); UPCAST: bf16 operands
    widened first (exact: the interpreter's dot mishandles bf16, see `_upcast_dot`)."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    if IEEE or UPCAST:
        out = tl.dot(a, b, input_precision="ieee")
    else:
        out = tl.dot(a, b)
    return out


@triton.jit
def _remap_attention_fwd(
    Q, K, V, O, LSE, PQ, PK, KLEN, INV_FREQ, PRM, COUNTS, PAIRS,
    s_qb, s_qh, s_qt, s_kb, s_kh, s_kt, s_vb, s_vh, s_vt,
    s_os, s_ob, s_oh, s_ot, s_ls, s_lb, s_lh,
    s_pqb, s_pkb,
    H, Tq, Tk, tiles_per_split, scale_log2,
    GROUP_SIZE: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, ROT: tl.constexpr,
    BD: tl.constexpr, BDV: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
    CHUNK: tl.constexpr, FLOOR: tl.constexpr, K_MODE: tl.constexpr, HAS_QMAX: tl.constexpr,
    HAS_NGLOBAL: tl.constexpr, HAS_KLEN: tl.constexpr, CAUSAL_PREFIX: tl.constexpr, PER_PAIR: tl.constexpr,
    COUNT: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr, FAST_TRIG: tl.constexpr,
):
    m_tile = tl.program_id(0)
    bh = tl.program_id(1)
    split = tl.program_id(2)
    b = (bh // H).to(tl.int64)  # int64: batch x head offsets can pass 2^31 elements
    h = (bh % H).to(tl.int64)
    hk = h // GROUP_SIZE
    DT = Q.dtype.element_ty

    offs_m = m_tile * BM + tl.arange(0, BM)
    offs_d = tl.arange(0, BD)
    offs_dv = tl.arange(0, BDV)
    row_ok = offs_m < Tq
    d_ok = offs_d < D

    # rotate-half partner channel, its sign, and the frequency of each channel (0 past ROT)
    HALF: tl.constexpr = ROT // 2
    partner = tl.where(offs_d < HALF, offs_d + HALF, tl.where(offs_d < ROT, offs_d - HALF, offs_d))
    sgn = tl.where(offs_d < HALF, -1.0, tl.where(offs_d < ROT, 1.0, 0.0))
    freq = tl.load(INV_FREQ + (offs_d % HALF), mask=offs_d < ROT, other=0.0).to(tl.float32)

    window = tl.load(PRM + P_WINDOW)
    chunk = tl.load(PRM + P_CHUNK)
    n_global = tl.load(PRM + P_NGLOBAL)

    # queries: both rotations, once
    pq = tl.load(PQ + b * s_pqb + offs_m, mask=row_ok, other=0.0).to(tl.float64)
    q_ptr = Q + b * s_qb + h * s_qh + offs_m[:, None] * s_qt
    qmask = row_ok[:, None] & d_ok[None, :]
    q = tl.load(q_ptr + offs_d[None, :], mask=qmask, other=0.0).to(tl.float32)
    qp = tl.load(q_ptr + partner[None, :], mask=qmask, other=0.0).to(tl.float32)
    q_near = _rotate(q, qp, pq[:, None], freq, sgn, FAST_TRIG).to(DT)
    if PER_PAIR:  # DPE: this head's group size per channel (0 past the rotary dim: true positions)
        groups = tl.load(PAIRS + h * HALF + (offs_d % HALF), mask=offs_d < ROT, other=0.0)
        q_far = _rotate(q, qp, _pair_positions(pq, groups, window, True), freq, sgn, FAST_TRIG).to(DT)
    else:
        q_far = _rotate(q, qp, _far_q(pq, PRM, FLOOR, HAS_QMAX)[:, None], freq, sgn, FAST_TRIG).to(DT)
    q_min = tl.min(tl.where(row_ok, pq, float("inf")), 0)
    q_max = tl.max(tl.where(row_ok, pq, float("-inf")), 0)

    k_base = K + b * s_kb + hk * s_kh
    v_base = V + b * s_vb + hk * s_vh
    k_end = Tk
    if HAS_KLEN:
        k_end = tl.minimum(Tk, tl.load(KLEN + b))
    n_tiles = tl.cdiv(k_end, BN)
    start = split * tiles_per_split
    stop = tl.minimum(start + tiles_per_split, n_tiles)
    if CAUSAL_PREFIX:  # positions increase and the queries are the last Tq keys
        stop = tl.minimum(stop, tl.cdiv(Tk - Tq + tl.minimum((m_tile + 1) * BM, Tq), BN))

    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, BDV], tl.float32)
    for n_tile in range(start, stop):
        offs_n = n_tile * BN + tl.arange(0, BN)
        col_ok = offs_n < k_end
        pk = tl.load(PK + b * s_pkb + offs_n, mask=col_ok, other=0.0).to(tl.float64)
        k_min = tl.min(tl.where(col_ok, pk, float("inf")), 0)
        k_max = tl.max(tl.where(col_ok, pk, float("-inf")), 0)
        all_cols = (n_tile + 1) * BN <= k_end
        # ---- the tile's class: the inequalities of remap_tiles.classify ----
        causal = q_max >= k_min
        if CHUNK:
            t_min = window + chunk * tl.floor(k_min / chunk)
            t_max = window + chunk * tl.floor(k_max / chunk)
            near_any = causal & (q_min <= t_max)
            far_any = q_max > t_min
            near_full = (q_min >= k_max) & (q_max <= t_min)
            far_full = q_min > t_max
        else:
            near_any = causal & (q_min - k_max < window)
            far_any = q_max - k_min >= window
            near_full = (q_min - k_max >= 0) & (q_max - k_min < window)
            far_full = q_min - k_max >= window
        if HAS_NGLOBAL:
            far_any = far_any & (k_min < n_global)
            far_full = far_full & (k_max < n_global)
        near_full = near_full & all_cols
        far_full = far_full & all_cols
        if COUNT:
            cls = tl.where(near_any & far_any, STRADDLING,
                           tl.where(near_any, NEAR, tl.where(far_any, FAR, SKIPPED)))
            tl.atomic_add(COUNTS + cls, 1)
        if near_any | far_any:
            k_ptr = k_base + offs_n[:, None] * s_kt
            kmask = col_ok[:, None] & d_ok[None, :]
            k = tl.load(k_ptr + offs_d[None, :], mask=kmask, other=0.0).to(tl.float32)
            kp = tl.load(k_ptr + partner[None, :], mask=kmask, other=0.0).to(tl.float32)
            s = tl.full([BM, BN], float("-inf"), tl.float32)
            if near_any:
                k_near = _rotate(k, kp, pk[:, None], freq, sgn, FAST_TRIG).to(DT)
                s_near = _dot(q_near, tl.trans(k_near), IEEE, UPCAST)
                if near_full:
                    s = s_near * scale_log2
                else:
                    if CHUNK:
                        thr = window + chunk * tl.floor(pk / chunk)
                        is_near = (pk[None, :] <= pq[:, None]) & (pq[:, None] <= thr[None, :])
                    else:
                        delta = pq[:, None] - pk[None, :]
                        is_near = (delta >= 0) & (delta < window)
                    s = tl.where(is_near & col_ok[None, :], s_near * scale_log2, s)
            if far_any:
                if PER_PAIR:
                    k_far = _rotate(k, kp, _pair_positions(pk, groups, window, False), freq, sgn, FAST_TRIG).to(DT)
                elif K_MODE == 0:
                    k_far = k.to(DT)
                else:
                    k_far = _rotate(k, kp, _far_k(pk, PRM, FLOOR, K_MODE)[:, None], freq, sgn, FAST_TRIG).to(DT)
                s_far = _dot(q_far, tl.trans(k_far), IEEE, UPCAST)
                if far_full:
                    s = s_far * scale_log2
                else:
                    if CHUNK:
                        thr = window + chunk * tl.floor(pk / chunk)
                        is_far = pq[:, None] > thr[None, :]
                    else:
                        is_far = pq[:, None] - pk[None, :] >= window
                    if HAS_NGLOBAL:
                        is_far = is_far & (pk < n_global)[None, :]
                    s = tl.where(is_far & col_ok[None, :], s_far * scale_log2, s)
            # ---- online softmax (base 2) ----
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_safe)
            p = tl.exp2(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + offs_n[:, None] * s_vt + offs_dv[None, :],
                        mask=col_ok[:, None] & (offs_dv < DV)[None, :], other=0.0)
            acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, IEEE, UPCAST)
            m_i = m_new

    seen = l_i > 0.0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    lse = tl.where(seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) * LN2, float("-inf"))
    o_ptr = O + split * s_os + b * s_ob + h * s_oh + offs_m[:, None] * s_ot + offs_dv[None, :]
    tl.store(o_ptr, out.to(O.dtype.element_ty), mask=row_ok[:, None] & (offs_dv < DV)[None, :])
    tl.store(LSE + split * s_ls + b * s_lb + h * s_lh + offs_m, lse, mask=row_ok)


@triton.jit
def _combine_splits(OP, LP, O, LSE, S, s_os, s_ls, DV: tl.constexpr, BDV: tl.constexpr, BS: tl.constexpr):
    """Flash-decoding's last step: one program per (batch, head, query) row merges the S key
    splits' (o, lse) exactly, lse = log sum_s e^lse_s, o = sum_s e^(lse_s - lse) o_s."""
    row = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, BS)
    offs_d = tl.arange(0, BDV)
    s_ok = offs_s < S
    lse = tl.load(LP + offs_s * s_ls + row, mask=s_ok, other=float("-inf"))
    m = tl.max(lse, 0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse - m_safe)  # 0 for a split that saw no key
    total = tl.sum(w, 0)
    o = tl.load(OP + offs_s[:, None] * s_os + row * DV + offs_d[None, :],
                mask=s_ok[:, None] & (offs_d < DV)[None, :], other=0.0)
    out = tl.sum(o * w[:, None], 0) / tl.where(total > 0, total, 1.0)
    tl.store(O + row * DV + offs_d, out.to(O.dtype.element_ty), mask=offs_d < DV)
    tl.store(LSE + row, tl.where(total > 0, m_safe + tl.log(tl.where(total > 0, total, 1.0)), float("-inf")))


def _upcast_dot(dtype) -> bool:
    """Triton 3.9's interpreter (TRITON_INTERPRET=1) multiplies bf16 operands of tl.dot as raw
    integers (garbage); widening the bf16 values to float32 first is exact and gives the
    product the compiled kernel computes up to the summation order. Compiled: never."""
    return dtype == torch.bfloat16 and _interpreted()


def _interpreted() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (which has no libdevice functions)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _positions(pos: torch.Tensor, B: int, device) -> tuple[torch.Tensor, int]:
    """float64 contiguous [B|1, T] on the device, and its batch stride (0 when shared)."""
    pos = pos.to(device=device, dtype=torch.float64).contiguous()
    return pos, (0 if pos.shape[0] == 1 else pos.stride(0))


@functools.lru_cache(maxsize=32)
def _params(rule: RemapRule, device) -> torch.Tensor:
    """The rule's float64 parameter table on the device, made once per (rule, device): a decode
    step's layers would otherwise each copy it from the host."""
    finite = lambda x: x if math.isfinite(x) else 0.0  # noqa: E731 - unused unless finite
    values = [rule.window, rule.chunk, rule.group, rule.q_mul, rule.q_add, finite(rule.q_max),
              finite(rule.n_global)]   # the order of P_WINDOW .. P_NGLOBAL
    return torch.tensor(values, dtype=torch.float64, device=device)


#: launch settings the CUDA path uses unless a call names its own; None = chosen by `launch_config`.
#: Untuned (no GPU was at hand when written): benchmarks/remap_kernel_speed.py --configs sets these
#: to compare a few.
OVERRIDES: dict = {"block_m": None, "block_n": None, "num_warps": None, "num_stages": None, "fast_trig": None}


def launch_config(Tq: int, D: int) -> dict:
    """Tile sizes and warps: 16 query rows for decoding (tl.dot's smallest tile), else 128 x 64
    for head dims up to 64 and 64 x 64 above (the kernel holds two rotated query tiles); the
    hardware's approximate sin / cos after the exact range reduction (`_rotate`)."""
    wide = Tq > 16 and D <= 64
    cfg = {"block_m": 16 if Tq <= 16 else (128 if wide else 64), "block_n": 64,
           "num_warps": 8 if wide else 4, "num_stages": None, "fast_trig": True}
    return {key: value if OVERRIDES[key] is None else OVERRIDES[key] for key, value in cfg.items()}


def queries_are_last_keys(pos_q: torch.Tensor, pos_k: torch.Tensor) -> bool:
    """Whether key positions strictly increase and the queries are the last Tq keys (prefill,
    chunked prefill): the kernel may then stop at each query tile's last key. Decoding one token
    gains nothing from it and is not checked (the check waits for the device)."""
    Tq, Tk = pos_q.shape[-1], pos_k.shape[-1]
    if Tq < 2 or Tq > Tk or pos_q.shape[0] not in (1, pos_k.shape[0]):
        return False
    pk = pos_k.to(pos_q.device)
    increasing = (pk[..., 1:] > pk[..., :-1]).all()
    return bool(increasing & (pos_q == pk[..., Tk - Tq:]).all())


def default_splits(programs: int, key_tiles: int, device) -> int:
    """Key splits for few programs over many keys (decoding): enough programs to fill the GPU,
    each still walking several key tiles. 1 on CPU (the interpreter) unless asked."""
    if device.type != "cuda":
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    want = max(1, (2 * sms) // max(1, programs))
    return max(1, min(want, key_tiles // 4))


def remap_attention(q, k, v, pos_q, pos_k, inv_freq, rule: RemapRule, scale: float, *,
                    k_len: torch.Tensor | None = None, causal_prefix: bool = False,
                    block_m: int | None = None, block_n: int | None = None, splits: int | None = None,
                    counts: torch.Tensor | None = None, num_warps: int | None = None,
                    num_stages: int | None = None, pair_groups: torch.Tensor | None = None):
    """(o [B, H, Tq, dv] in q's dtype, lse [B, H, Tq] float32) of the remapped causal attention
    (module docstring). scale multiplies the logits (attention factors folded in).
    causal_prefix: the caller knows the positions increase and the queries are the last Tq keys
    (prefill, chunked prefill): key tiles past a query tile's last key are not visited at all.
    splits: key splits (flash-decoding, merged by log-sum-exp); counts: an int32 [4] tensor the
    tile classes are added to (STRADDLING, NEAR, FAR, SKIPPED), for tests and benchmarks.
    pair_groups: DPE's [H, rot/2] group size per query head and frequency pair (0: the pair keeps
    its true position); the far positions are then per pair (`_pair_positions`), the rule giving
    only the window."""
    B, H, Tq, D = q.shape
    Bk, Hkv, Tk, Dk = k.shape
    DV = v.shape[-1]
    if Dk != D or v.shape[:3] != k.shape[:3] or Bk != B or H % Hkv:
        raise ValueError(f"shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: need "
                         "q [B,H,Tq,d], k [B,Hkv,Tk,d], v [B,Hkv,Tk,dv], Hkv dividing H")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one of float16 / bfloat16 / float32, got {q.dtype}, {k.dtype}, {v.dtype}")
    rot = 2 * inv_freq.shape[-1]
    if rot > D or rot < 2:
        raise ValueError(f"rotary dim {rot} (2 len(inv_freq)) must be in [2, head dim {D}]")
    dev = q.device
    if pair_groups is not None:
        if tuple(pair_groups.shape) != (H, rot // 2) or rule.chunk > 0:
            raise ValueError(f"pair_groups must be [{H}, {rot // 2}] (query heads, frequency pairs) with a "
                             f"window rule, got {tuple(pair_groups.shape)}, chunk {rule.chunk}")
        pair_groups = pair_groups.to(device=dev, dtype=torch.float64).contiguous()
    q = q if q.stride(-1) == 1 else q.contiguous()
    k = k if k.stride(-1) == 1 else k.contiguous()
    v = v if v.stride(-1) == 1 else v.contiguous()
    pq, s_pqb = _positions(pos_q, B, dev)
    pk, s_pkb = _positions(pos_k, B, dev)
    cfg = launch_config(Tq, D)
    BM, BN = block_m or cfg["block_m"], block_n or cfg["block_n"]
    num_warps, num_stages = num_warps or cfg["num_warps"], num_stages or cfg["num_stages"]
    m_tiles = triton.cdiv(Tq, BM)
    key_tiles = triton.cdiv(Tk, BN)
    S = splits or default_splits(m_tiles * B * H, key_tiles, dev)
    S = max(1, min(S, key_tiles))
    per_split = triton.cdiv(key_tiles, S)
    S = triton.cdiv(key_tiles, per_split)
    if S == 1:
        o = torch.empty(1, B, H, Tq, DV, dtype=q.dtype, device=dev)
    else:
        o = torch.empty(S, B, H, Tq, DV, dtype=torch.float32, device=dev)
    lse = torch.empty(S, B, H, Tq, dtype=torch.float32, device=dev)
    inv = inv_freq.to(device=dev, dtype=torch.float32).contiguous()
    kl = k_len.to(device=dev, dtype=torch.int32).contiguous() if k_len is not None else pk
    cnt = counts if counts is not None else lse
    extra = {}
    if num_warps:
        extra["num_warps"] = num_warps
    if num_stages:
        extra["num_stages"] = num_stages
    grid = (m_tiles, B * H, S)
    _remap_attention_fwd[grid](
        q, k, v, o, lse, pq, pk, kl, inv, _params(rule, dev), cnt, pq if pair_groups is None else pair_groups,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2), o.stride(3), lse.stride(0), lse.stride(1), lse.stride(2),
        s_pqb, s_pkb,
        H, Tq, Tk, per_split, float(scale) * LOG2E,
        GROUP_SIZE=H // Hkv, D=D, DV=DV, ROT=rot,
        BD=triton.next_power_of_2(D), BDV=triton.next_power_of_2(DV), BM=BM, BN=BN,
        CHUNK=rule.chunk > 0, FLOOR=bool(rule.floor), K_MODE=K_MODES.index(rule.k_mode),
        HAS_QMAX=math.isfinite(rule.q_max), HAS_NGLOBAL=math.isfinite(rule.n_global),
        HAS_KLEN=k_len is not None, CAUSAL_PREFIX=bool(causal_prefix), COUNT=counts is not None,
        PER_PAIR=pair_groups is not None,
        IEEE=q.dtype == torch.float32, UPCAST=_upcast_dot(q.dtype),
        FAST_TRIG=bool(cfg["fast_trig"]) and not _interpreted(), **extra,
    )
    if S == 1:
        return o[0], lse[0]
    out = torch.empty(B, H, Tq, DV, dtype=q.dtype, device=dev)
    total = torch.empty(B, H, Tq, dtype=torch.float32, device=dev)
    _combine_splits[(B * H * Tq,)](o, lse, out, total, S, o.stride(0), lse.stride(0),
                                   DV=DV, BDV=triton.next_power_of_2(DV), BS=triton.next_power_of_2(S))
    return out, total
