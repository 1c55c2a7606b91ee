"""The one-pass Triton kernel of the remapping methods (lengen.kernels.triton_remap), run on the
CPU by Triton's interpreter (TRITON_INTERPRET=1, set below before triton is imported; it must stay
set while the kernel runs) or, on a machine with CUDA, compiled on the GPU, against a naive
float64 per-pair reference written here: r(i, j) from each method's formula, q rotated by r, a
full softmax. Also: the tile counts (lengen.kernels.remap_tiles) against hand counts and the
kernel's own, the path choice, and a tiny Llama's logits with the kernel forced == blockwise.
Small shapes: the interpreter runs each program in numpy."""

from __future__ import annotations

import math
import os

import pytest
import torch

# compiled on CUDA unless the interpreter was asked for; else the interpreter, which triton reads
# when a kernel is defined and when it runs
DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
triton = pytest.importorskip("triton")

from lengen.extrapolation import RopeSpec, build_method  # noqa: E402
from lengen.extrapolation.string_method import STRING_FACTOR  # noqa: E402
from lengen.kernels import flex_remap, triton_remap  # noqa: E402
from lengen.kernels.remap_tiles import RemapRule, cost_over_sdpa, tile_counts  # noqa: E402

D = 16
ROPE = RopeSpec(rotary_dim=D, base=10000.0, train_length=64)
T = 70
BLOCK = 16


# ---- the reference: r(i, j) per pair from the papers' formulas (d = i - j >= 0) ---------------
def r_of(spec):
    """A scalar r(i, j) (None: masked) for the spec's method, written from the formulas."""
    name, _, opts = spec.partition(":")
    o = {k: float(v) for k, v in (kv.split("=") for kv in opts.split(","))} if opts else {}
    if name == "rerope":
        w = o["window"]
        return lambda i, j: i - j if i - j < w else w
    if name == "leaky_rerope":
        w, k = o["window"], o["factor"]
        return lambda i, j: i - j if i - j < w else w + (i - j - w) / k
    if name == "self_extend":
        G, W = o["group"], o["window"]
        return lambda i, j: i - j if i - j < W else math.floor(i / G) - math.floor(j / G) + W - W / G
    if name == "lambda":
        n, w = o["n_global"], o["window"]
        return lambda i, j: i - j if i - j < w else (w if j < n else None)
    if name == "sinks":
        n, w = o["n_global"], o["window"]
        return lambda i, j: i - j if i - j < w else (min(i, w + n - 1) - j if j < n else None)
    if name == "dca":
        cs, ls = o["chunk_size"], o["local_size"]
        s = cs - ls
        C = min(cs, 2 * s - 1)
        return lambda i, j: min(i - j, C - (j - s * math.floor(j / s)))
    if name == "string":
        S, W = o["shift"], o["window"]
        return lambda i, j: i - j if i - j < S else i - j - S + W
    raise KeyError(name)


def naive(spec, q, k, v, pos_q, pos_k, inv_freq, scale, k_len=None):
    """(o, lse) float64: softmax over allowed keys of (R(r(i, j)) q_i) . k_j * scale."""
    r_fn = r_of(spec)
    B, H, Tq, d = q.shape
    rot = 2 * inv_freq.shape[0]
    k = k.double().repeat_interleave(H // k.shape[1], 1)
    v = v.double().repeat_interleave(H // v.shape[1], 1)
    o = torch.zeros(B, H, Tq, v.shape[-1], dtype=torch.float64)
    lse = torch.full((B, H, Tq), -math.inf, dtype=torch.float64)
    for b in range(B):
        pq = pos_q[min(b, pos_q.shape[0] - 1)].tolist()
        pk = pos_k[min(b, pos_k.shape[0] - 1)].tolist()
        n = len(pk) if k_len is None else int(k_len[b])
        for t, i in enumerate(pq):
            r = [r_fn(i, j) if j <= i and idx < n else None for idx, j in enumerate(pk)]
            keys = [idx for idx, x in enumerate(r) if x is not None]
            if not keys:
                continue
            rr = torch.tensor([r[idx] for idx in keys], dtype=torch.float64)
            ang = rr[:, None] * inv_freq.double()[None, :]                      # [K, rot/2]
            cos, sin = ang.cos(), ang.sin()
            x = q[b, :, t].double()                                             # [H, d]
            x1, x2 = x[:, None, :rot // 2], x[:, None, rot // 2:rot]
            qr = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[:, None, rot:].expand(-1, len(keys), -1)], -1)
            s = (qr * k[b, :, keys]).sum(-1) * scale                            # [H, K]
            lse[b, :, t] = torch.logsumexp(s, -1)
            o[b, :, t] = torch.einsum("hk,hkd->hd", torch.softmax(s, -1), v[b, :, keys])
    return o, lse


def qkv(B=2, H=1, Hkv=None, Tq=T, Tk=T, d=D, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    Hkv = Hkv or H
    return (torch.randn(B, H, Tq, d, generator=g).to(dtype), torch.randn(B, Hkv, Tk, d, generator=g).to(dtype),
            torch.randn(B, Hkv, Tk, d, generator=g).to(dtype))


def kernel(spec, q, k, v, pos_q, pos_k, rope=ROPE, **kw):
    """(o, lse) of the kernel on DEVICE, back on the CPU, with the method's inv_freq and scale."""
    method = build_method(spec, rope)
    inv_freq, af = method.rope_params(0)
    rule, scale = method.kernel_rule(pos_q, pos_k, af, q.shape[-1] ** -0.5)
    kw = {key: (x.to(DEVICE) if isinstance(x, torch.Tensor) and key != "counts" else x) for key, x in kw.items()}
    o, lse = triton_remap.remap_attention(*(x.to(DEVICE) for x in (q, k, v, pos_q, pos_k)), inv_freq, rule,
                                          scale, block_m=BLOCK, block_n=BLOCK, **kw)
    return o.cpu(), lse.cpu(), inv_freq, scale


SPECS = [  # windows / chunks that put the near / far boundary inside the 16-tiles
    "rerope:window=20", "leaky_rerope:window=18,factor=3", "self_extend:group=3,window=20",
    "lambda:n_global=5,window=20", "sinks:n_global=4,window=30", "dca:chunk_size=40,local_size=10",
    "dca:chunk_size=40,local_size=30", "string:shift=30,window=8",
]


def close(out, ref, tol=2e-5):
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("spec", SPECS)
def test_prefill_output_and_lse_equal_the_naive_reference(spec):
    """Positions per batch row (the second row offset by 37: DCA's chunks move, the others not)."""
    q, k, v = qkv()
    pos = torch.stack([torch.arange(T), torch.arange(T) + 37])
    o, lse, inv_freq, scale = kernel(spec, q, k, v, pos, pos)
    ref_o, ref_lse = naive(spec, q, k, v, pos, pos, inv_freq, scale)
    close(o, ref_o)
    close(lse, ref_lse)


@pytest.mark.parametrize("spec", ["rerope:window=20", "self_extend:group=4,window=12", "dca:chunk_size=24,local_size=6"])
def test_irregular_positions_and_ragged_lengths(spec):
    """Sorted random positions per row with gaps, keys past k_len ignored (a padded batch), and
    for the window methods float positions: the tiles are classified from positions, not indices."""
    g = torch.Generator().manual_seed(3)
    pos = torch.stack([torch.randperm(2 * T, generator=g)[:T].sort().values for _ in range(2)])
    k_len = torch.tensor([T, T - 23])
    q, k, v = qkv(seed=1)
    o, lse, inv_freq, scale = kernel(spec, q, k, v, pos, pos, k_len=k_len)
    ref_o, ref_lse = naive(spec, q, k, v, pos, pos, inv_freq, scale, k_len=k_len)
    close(o, ref_o)
    close(lse, ref_lse)
    if not spec.startswith("dca"):
        fpos = (torch.arange(T) * 0.75)[None]
        o, lse, inv_freq, scale = kernel(spec, q, k, v, fpos, fpos)
        ref_o, ref_lse = naive(spec, q, k, v, fpos, fpos, inv_freq, scale)
        close(o, ref_o)
        close(lse, ref_lse)


@pytest.mark.parametrize("spec", ["self_extend:group=3,window=20", "dca:chunk_size=40,local_size=10",
                                  "string:shift=30,window=8"])
def test_grouped_query_and_partial_rotary(spec):
    """2 query heads on 1 key / value head, head dim 32 with a rotary dim of 16 (channels past
    it unrotated), value dim 16."""
    rope = RopeSpec(rotary_dim=16, base=10000.0, train_length=64)
    q, k, _ = qkv(B=1, H=2, Hkv=1, d=32, seed=2)
    v = torch.randn(1, 1, T, 16, generator=torch.Generator().manual_seed(4))
    pos = torch.arange(T)[None]
    o, lse, inv_freq, scale = kernel(spec, q, k, v, pos, pos, rope=rope, causal_prefix=True)
    ref_o, ref_lse = naive(spec, q, k, v, pos, pos, inv_freq, scale)
    close(o, ref_o)
    close(lse, ref_lse)


@pytest.mark.parametrize("spec", ["rerope:window=20", "sinks:n_global=4,window=30", "dca:chunk_size=40,local_size=10",
                                  "string:shift=30,window=8", "lambda:n_global=0,window=20"])
def test_decode_over_the_cache_equals_the_last_prefill_row(spec):
    """One query against the whole cache of un-rotated keys, keys split in 3 (flash-decoding,
    merged by log-sum-exp) and not: the last row of the prefill. lambda without global keys: the
    first split sees no key at all (weight 0 in the merge)."""
    q, k, v = qkv()
    pos = torch.arange(T)[None]
    o, lse, _, _ = kernel(spec, q, k, v, pos, pos, causal_prefix=True)
    for splits in (1, 3):
        o1, lse1, _, _ = kernel(spec, q[:, :, -1:], k, v, pos[:, -1:], pos, splits=splits)
        torch.testing.assert_close(o1, o[:, :, -1:], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lse1, lse[:, :, -1:], atol=1e-5, rtol=1e-5)


def test_causal_prefix_changes_nothing_but_the_tiles_visited():
    spec = "self_extend:group=3,window=20"
    q, k, v = qkv()
    pos = torch.arange(T)[None]
    runs = []
    for prefix in (False, True):
        counts = torch.zeros(4, dtype=torch.int32, device=DEVICE)
        o, lse, _, _ = kernel(spec, q, k, v, pos, pos, causal_prefix=prefix, counts=counts)
        runs.append((o, lse, counts.cpu()))
    torch.testing.assert_close(runs[0][0], runs[1][0], atol=0, rtol=0)
    assert runs[1][2][triton_remap.SKIPPED.value] == 0 < runs[0][2][triton_remap.SKIPPED.value]
    assert torch.equal(runs[0][2][:3], runs[1][2][:3])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs(dtype):
    """bf16 / fp16 in and out, float32 accumulation: against the float64 reference of the rounded
    inputs (the rotated q and k are rounded to the dtype before the dot, as apply_rotary does)."""
    spec = "self_extend:group=3,window=20"
    q, k, v = qkv(dtype=dtype)
    pos = torch.arange(T)[None]
    o, lse, inv_freq, scale = kernel(spec, q, k, v, pos, pos)
    assert o.dtype == dtype and lse.dtype == torch.float32
    ref_o, ref_lse = naive(spec, q, k, v, pos, pos, inv_freq, scale)
    close(o, ref_o, tol=3e-2)
    close(lse, ref_lse, tol=3e-2)


def test_rows_without_keys_give_zero_and_minus_infinity():
    """Queries before every key (causally nothing to see): o = 0, lse = -inf, no NaN."""
    q, k, v = qkv(B=1, H=1, Tq=4, Tk=20)
    o, lse, _, _ = kernel("rerope:window=5", q, k, v, torch.arange(4)[None] - 10, torch.arange(20)[None])
    assert torch.equal(o, torch.zeros_like(o)) and bool((lse == -math.inf).all())


# ---- DPE: a far position per head and frequency pair ------------------------------------------
# test_dpe's reference, written pair by pair; 2 query heads, 1 key head, each head its own key pairs
DPE_SPEC = "dpe:scales=2-3-4-5,window=6"   # 5 does not divide 6: the float shift W - W / s matters


def dpe_layer(mask):
    from test_dpe import ROPE as DPE_ROPE

    method = build_method(DPE_SPEC, DPE_ROPE)
    if mask is not None:
        method.set_key_pairs({0: mask})
    return method.for_layer(0)


def dpe_kernel(method, q, k, v, pos_q, pos_k, **kw):
    inv_freq, af = method.rope_params(0)
    rule, scale = method.kernel_rule(pos_q, pos_k, af, q.shape[-1] ** -0.5)
    o, lse = triton_remap.remap_attention(*(x.to(DEVICE) for x in (q, k, v, pos_q, pos_k)), inv_freq, rule, scale,
                                          block_m=8, block_n=8, pair_groups=method.kernel_pair_groups(q.shape[1]),
                                          **kw)
    return o.cpu(), lse.cpu(), scale


@pytest.mark.parametrize("masked", [True, False])
def test_dpe_per_pair_positions_equal_the_naive_reference(masked):
    """Prefill over 30 positions in 8-tiles (near, far and straddling tiles), the second batch row
    offset by 11 (floor(p / s) moves), then one decoded query against the cache split in 3."""
    from test_dpe import MASK, naive_dpe

    method = dpe_layer(MASK if masked else None)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, h, 30, 16, generator=g) for h in (2, 1, 1))
    pos = torch.stack([torch.arange(30), torch.arange(30) + 11])
    o, lse, scale = dpe_kernel(method, q, k, v, pos, pos, causal_prefix=True)
    for b in range(2):
        ref = naive_dpe(q[b].double(), k[b].double().expand(2, -1, -1), v[b].double().expand(2, -1, -1),
                        pos[b], pos[b], 6, [2, 2, 3, 3, 4, 4, 5, 5], MASK if masked else None, scale)
        close(o[b], ref)
    o1, lse1, _ = dpe_kernel(method, q[:, :, -1:], k, v, pos[:, -1:], pos, splits=3)
    torch.testing.assert_close(o1, o[:, :, -1:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse1, lse[:, :, -1:], atol=1e-5, rtol=1e-5)


def test_dpe_pair_groups_of_equal_scales_and_every_pair_are_self_extend():
    """Every pair a key pair, one scale: the per-pair path gives Self-Extend's kernel output."""
    from test_dpe import ROPE as DPE_ROPE

    q, k, v = qkv(B=1, H=2, Hkv=1, Tq=30, Tk=30)
    pos = torch.arange(30)[None]
    method = build_method("dpe:scales=3-3-3-3,window=6", DPE_ROPE)
    o, lse, _ = dpe_kernel(method, q, k, v, pos, pos)
    se, se_lse, _, _ = kernel("self_extend:group=3,window=6", q, k, v, pos, pos, rope=DPE_ROPE)
    torch.testing.assert_close(o, se, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(lse, se_lse, atol=1e-6, rtol=1e-6)


def test_dpe_pair_groups_of_the_wrong_shape_are_refused():
    method = dpe_layer(None)
    q, k, v = qkv(B=1, H=2, Hkv=1, Tq=8, Tk=8)
    pos = torch.arange(8)[None]
    inv_freq, _ = method.rope_params(0)
    with pytest.raises(ValueError, match=r"pair_groups must be \[2, 8\]"):
        triton_remap.remap_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), pos, pos, inv_freq,
                                     method.remap_rule(), 0.25, pair_groups=torch.ones(1, 8))


# ---- through the methods: the path choice and whole models -----------------------------------
@pytest.fixture
def force_triton():
    previous = flex_remap.triton_mode()
    flex_remap.set_triton_mode("force")
    yield
    flex_remap.set_triton_mode(previous)


@pytest.mark.parametrize("spec,factor", [("string:shift=30,window=8", STRING_FACTOR),
                                         ("dca:chunk_size=40,local_size=10,original_length=20", None),
                                         ("lambda:n_global=5,window=20", 1.0)])
def test_method_attend_goes_through_the_kernel(spec, factor, force_triton, monkeypatch):
    """method.attend with the kernel forced: the logit factors the method adds (STRING's
    1 + 0.1 ln 2 on q and k, DCA's temperature m = 1 + 0.1 ln(T / original_length)) reach it,
    and so do the 2 key / value heads of the 4 query heads, unrepeated."""
    calls = []
    real = triton_remap.remap_attention
    monkeypatch.setattr(triton_remap, "remap_attention",
                        lambda *a, **kw: calls.append(a[1].shape[1]) or real(*a, **kw))
    method = build_method(spec, ROPE)
    q, k, v = qkv(H=4, Hkv=2)
    pos = torch.arange(T)[None]
    out = method.attend(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), pos.to(DEVICE), pos.to(DEVICE)).cpu()
    assert calls == [2]
    factor = factor or (1 + 0.1 * math.log(T / 20))
    ref, _ = naive(spec.split(",original")[0], q, k, v, pos, pos, method.rope_params(0)[0], D ** -0.5 * factor ** 2)
    close(out, ref)


def test_choose_picks_by_device_and_mode(monkeypatch):
    """auto: never on CPU tensors (flex when forced, else blockwise); "off" and a method without a
    rule skip it; "force" picks it anywhere."""
    method = build_method("rerope:window=20", ROPE)
    q = torch.zeros(1, 1, 4, D)
    monkeypatch.setattr(flex_remap, "_triton_mode", "auto")
    monkeypatch.setattr(flex_remap, "_mode", "auto")
    assert flex_remap.choose(method, q) == "blockwise"
    monkeypatch.setattr(flex_remap, "_mode", "force")
    assert flex_remap.choose(method, q) == "flex"
    monkeypatch.setattr(flex_remap, "_triton_mode", "force")
    assert flex_remap.choose(method, q) == "triton"
    monkeypatch.setattr(method, "remap_rule", lambda: None)
    assert flex_remap.choose(method, q) == "flex"
    for value, expected in [("1", "force"), ("off", "off"), ("", "auto")]:
        monkeypatch.setenv("LENGEN_TRITON_REMAP", value)
        assert flex_remap._mode_from_env("LENGEN_TRITON_REMAP") == expected


def test_tiny_llama_logits_with_the_kernel_forced_equal_blockwise(force_triton):
    """lengen.hf.extend on a 2-layer random Llama (grouped-query attention), 48 tokens, 1.5x past
    its 32 trained positions: the logits with the kernel == with the blockwise path."""
    transformers = pytest.importorskip("transformers")
    from lengen.hf import extend

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                      max_position_embeddings=32, initializer_range=0.1)
    model = transformers.LlamaForCausalLM(config).eval().to(DEVICE)
    ids = torch.randint(0, 100, (1, 48), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    flex = flex_remap.mode()
    calibration = torch.randint(0, 100, (2, 32), generator=torch.Generator().manual_seed(2))
    for spec in ("self_extend:group=3,window=8", "dca:chunk_size=24,local_size=4", "dpe:scales=2-3-4-8,window=8,topk=5"):
        extend(model, spec, calibration=calibration)   # dpe: its key pairs, 5 of 8 per head
        with torch.no_grad():
            flex_remap.set_triton_mode("force")
            ours = model(ids).logits
            flex_remap.set_triton_mode("off")
            flex_remap.set_mode("off")
            theirs = model(ids).logits
            flex_remap.set_mode(flex)
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
        from lengen.hf import restore
        restore(model)


# ---- tile counts ------------------------------------------------------------------------------
# 64 positions, 16-tiles: 4 x 4 tile pairs, 10 of them causal (the diagonal and below).
HAND = {
    # ReRoPE w = 16: the diagonal tiles all near (d <= 15); the first sub-diagonal straddles
    # (d from 1 to 31); the rest all far (d >= 17).
    "rerope:window=16": dict(straddling=3, near=4, far=3, skipped=6),
    # w = 64: no pair reaches the window: every causal tile near.
    "rerope:window=64": dict(straddling=0, near=10, far=0, skipped=6),
    # w = 40: diagonal near; sub-diagonal d in [1, 31] near; 2nd sub-diagonal d in [17, 47] straddles;
    # the corner (q 48..63, k 0..15) d in [33, 63] straddles.
    "rerope:window=40": dict(straddling=3, near=7, far=0, skipped=6),
    # Lambda w = 16, n_global = 4: far pairs only with keys 0..3 (key tile 0): tiles (1,0) straddle,
    # (2,0), (3,0) far, the sub-diagonal's other tiles near only, the rest nothing (skipped).
    "lambda:n_global=4,window=16": dict(straddling=1, near=6, far=2, skipped=7),
    # DCA chunk 24, local 8: s = 16 (key tiles = chunks), C = 24: key tile n is near for
    # p_i <= 24 + 16 n: the diagonal near, the sub-diagonal straddles (rows 16n+16..16n+24 near),
    # the rest far.
    "dca:chunk_size=24,local_size=8": dict(straddling=3, near=4, far=3, skipped=6),
}


@pytest.mark.parametrize("spec", list(HAND))
def test_tile_counts_by_hand_and_by_the_kernel(spec):
    method = build_method(spec, RopeSpec(rotary_dim=D, train_length=64))
    counts = tile_counts(method.remap_rule(), 64, BLOCK, BLOCK)
    assert {k: counts[k] for k in HAND[spec]} == HAND[spec]
    assert counts["total"] == 16 and counts["causal"] == 10
    q, k, v = qkv(B=1, H=1, Tq=64, Tk=64)
    pos = torch.arange(64)[None]
    seen = torch.zeros(4, dtype=torch.int32, device=DEVICE)
    kernel(spec, q, k, v, pos, pos, counts=seen)
    assert dict(zip(triton_remap.CLASSES, seen.tolist())) == HAND[spec]


def test_cost_over_sdpa():
    counts = tile_counts(RemapRule(16, q_mul=0.0, q_add=16, k_mode="zero"), 64, BLOCK, BLOCK)
    assert cost_over_sdpa(counts) == (4 + 3 + 2 * 3) / 10
    assert cost_over_sdpa(tile_counts(None, 64, BLOCK, BLOCK)) == 1.0
    decode = tile_counts(RemapRule(20, q_mul=0.0, q_add=20, k_mode="zero"), 64, BLOCK, BLOCK, query_rows=1)
    # the one query (position 63) sees key tile 3 near (d 0..15), straddles tile 2 (d 16..31,
    # w = 20) and tiles 0, 1 far
    assert (decode["near"], decode["straddling"], decode["far"]) == (1, 1, 2)


@pytest.mark.parametrize("spec", ["rerope:window=20", "self_extend:group=3,window=20"])
def test_large_positions_equal_the_blockwise_path(spec, force_triton):
    """Positions past 131000 (angles past 1e5 radians): the kernel's float64 range reduction of
    the float32 angle gives the cos / sin the blockwise path's rope_cos_sin does (both round the
    angle to float32, so they agree where the naive reference of exact relative angles does not)."""
    method = build_method(spec, ROPE)
    q, k, v = qkv(B=1)
    pos = torch.arange(T)[None] + 131000
    out = method.attend(*(x.to(DEVICE) for x in (q, k, v, pos, pos))).cpu()
    flex_remap.set_triton_mode("off")
    previous = flex_remap.mode()
    flex_remap.set_mode("off")
    try:
        ref = method.attend(q, k, v, pos, pos)
    finally:
        flex_remap.set_mode(previous)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
