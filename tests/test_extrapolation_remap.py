"""Position-remapping attention (rerope, leaky_rerope, self_extend, lambda, sinks): the blockwise
implementation against a naive per-pair reference, the relative-position maps of
training_free.md §10, identity properties, and memory that never holds a T x T matrix."""

import math

import pytest
import torch
import torch.nn.functional as F

from lengen.encodings.rope import apply_rotary, rope_cos_sin
from lengen.extrapolation import RopeSpec, blockwise, build_method
from lengen.kernels import lse_attention

ROPE = RopeSpec(rotary_dim=16, base=10000.0, train_length=64)
D = 16


# ---- the naive reference: r(i, j) from the formulas, q rotated by r, k by 0 ---------------------
def r_rerope(i, j, w):
    d = i - j
    return torch.where(d < w, d, torch.full_like(d, w))


def r_leaky(i, j, w, k):
    d = i - j
    return torch.where(d < w, d, w + (d - w) / k)


def r_self_extend(i, j, G, W):
    d = i - j
    return torch.where(d < W, d, torch.floor(i / G) - torch.floor(j / G) + W - W / G)


def r_lambda(i, j, n, w):
    d = i - j
    return torch.where(d < w, d, torch.where(j < n, torch.full_like(d, w), torch.full_like(d, math.nan)))


def r_sinks(i, j, n, w):
    d = i - j
    far = torch.clamp(i, max=w + n - 1) - j
    return torch.where(d < w, d, torch.where(j < n, far, torch.full_like(d, math.nan)))


METHODS = {  # spec (small blocks so every case crosses several blocks): reference r(i, j)
    "rerope:window=7,block=5": lambda i, j: r_rerope(i, j, 7),
    "leaky_rerope:window=6,factor=3,block=4": lambda i, j: r_leaky(i, j, 6, 3),
    "self_extend:group=3,window=4,block=6": lambda i, j: r_self_extend(i, j, 3, 4),
    "self_extend:group=4,window=8,block=5": lambda i, j: r_self_extend(i, j, 4, 8),
    "lambda:n_global=3,window=9,block=5": lambda i, j: r_lambda(i, j, 3, 9),
    "lambda:n_global=12,window=5,block=4": lambda i, j: r_lambda(i, j, 12, 5),
    "sinks:n_global=2,window=10,block=4": lambda i, j: r_sinks(i, j, 2, 10),
}


def naive_attention(q, k, v, pos_q, pos_k, r_fn, inv_freq, attention_factor=1.0, scale=None):
    """softmax_j(R(r(i,j)) q_i . k_j * scale * af^2) v_j over pairs with j <= i and r defined."""
    scale = D ** -0.5 if scale is None else scale
    i = pos_q.double()[:, :, None]
    j = pos_k.double()[:, None, :]
    r = r_fn(i.expand(-1, -1, j.shape[-1]), j.expand(-1, i.shape[1], -1))
    allowed = (j <= i) & ~torch.isnan(r)
    angle = r.nan_to_num(0)[..., None] * inv_freq.double()
    cos, sin = torch.cat([angle, angle], -1).cos()[:, None], torch.cat([angle, angle], -1).sin()[:, None]
    qe = q[:, :, :, None, :]
    half = q.shape[-1] // 2
    q_rot = qe * cos + torch.cat([-qe[..., half:], qe[..., :half]], -1) * sin   # [B,H,Tq,Tk,d]
    s = (q_rot * k[:, :, None]).sum(-1) * scale * attention_factor ** 2
    s = s.masked_fill(~allowed[:, None], float("-inf"))
    return (torch.softmax(s, -1) @ v).nan_to_num(0.0)


def qkv(B=2, H=3, T=53, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3)]


def layouts(T=53, B=2):
    g = torch.Generator().manual_seed(1)
    sorted_sample = lambda: torch.randperm(160, generator=g)[:T].sort().values  # noqa: E731
    return {
        "arange": torch.arange(T)[None],                         # banded path
        "offset": torch.arange(T)[None] + 37,                    # banded, positions not from 0
        "irregular": sorted_sample()[None],                      # general path
        "per_batch": torch.stack([sorted_sample() for _ in range(B)]),
        "float": (torch.arange(T) * 0.75)[None],                 # float positions
    }


@pytest.fixture(params=[True, False], ids=["fused", "matmul"])
def fused(request, monkeypatch):
    monkeypatch.setattr(lse_attention, "USE_FUSED", request.param)
    return request.param


@pytest.mark.parametrize("layout", list(layouts()))
@pytest.mark.parametrize("spec", list(METHODS))
def test_blockwise_matches_naive(spec, layout, fused):
    method = build_method(spec, ROPE)
    q, k, v = qkv()
    pos = layouts()[layout]
    inv_freq, af = method.rope_params(0)
    ref = naive_attention(q, k, v, pos, pos, METHODS[spec], inv_freq, af)
    cases = {
        "prefill": (slice(None), slice(None)),
        "decode": (slice(-1, None), slice(None)),                 # Tq = 1 against every key
        "chunk": (slice(-20, None), slice(None)),                 # chunked prefill
        "chunk_mid": (slice(-20, -9), slice(None, -9)),           # a chunk with the keys so far
    }
    for name, (rows, keys) in cases.items():
        out = method.attend(q[:, :, rows], k[:, :, keys], v[:, :, keys], pos[:, rows], pos[:, keys])
        torch.testing.assert_close(out, ref[:, :, rows], atol=2e-5, rtol=1e-5, msg=f"{name}")


def test_composition_with_yarn_and_logn(fused):
    method = build_method("yarn:factor=4+rerope:window=6,block=4+logn", ROPE)
    q, k, v = qkv(T=41)
    pos = torch.arange(41)[None]
    inv_freq, af = method.rope_params(41)
    assert af > 1
    q_scaled = q * build_method("logn", ROPE).query_scale(pos).double()
    ref = naive_attention(q_scaled, k, v, pos, pos, lambda i, j: r_rerope(i, j, 6), inv_freq, af)
    torch.testing.assert_close(method.attend(q, k, v, pos, pos), ref, atol=2e-5, rtol=1e-5)


def test_paths_are_both_exercised(monkeypatch):
    calls = []
    for name in ("_banded", "_general"):
        original = getattr(blockwise, name)
        monkeypatch.setattr(blockwise, name, lambda *a, _o=original, _n=name: calls.append(_n) or _o(*a))
    method = build_method("rerope:window=5,block=4", ROPE)
    q, k, v = qkv(T=20)
    method.attend(q, k, v, torch.arange(20)[None], torch.arange(20)[None])
    method.attend(q, k, v, torch.arange(0, 40, 2)[None], torch.arange(0, 40, 2)[None])
    assert calls == ["_banded", "_general"]


# ---- relative-position maps (training_free.md §10: query 15, keys 0..15) -----------------------
def public_map(spec):
    method = build_method(spec, ROPE)
    return method.relative_positions(torch.tensor([[15]]), torch.arange(16)[None])[0, 0].tolist()


def test_relative_position_maps_reference():
    assert public_map("rerope:window=4") == [4] * 12 + [3, 2, 1, 0]
    assert public_map("leaky_rerope:window=4,factor=2") == [9.5 - 0.5 * j for j in range(12)] + [3, 2, 1, 0]
    assert public_map("self_extend:group=2,window=4") == [9, 9, 8, 8, 7, 7, 6, 6, 5, 5, 4, 4, 3, 2, 1, 0]
    g3 = public_map("self_extend:group=3,window=4")
    expected = [23 / 3] * 3 + [20 / 3] * 3 + [17 / 3] * 3 + [14 / 3] * 3 + [3, 2, 1, 0]
    assert g3 == pytest.approx(expected)
    lam = build_method("lambda:n_global=10,window=4096", ROPE).relative_positions(
        torch.tensor([[5000]]), torch.tensor([[0, 9, 10, 904, 905, 5000]]))[0, 0].tolist()
    assert lam[:2] == [4096, 4096] and math.isnan(lam[2]) and math.isnan(lam[3]) and lam[4:] == [4095, 0]


def test_sinks_map_matches_a_start_recent_cache():
    """StreamingLLM S=4, R=2000 once full: the query sits at cache position S+R-1, so the largest
    distance is S+R-1 and recent keys keep their true distance. S+R-1 (not the reference note's
    S+R) because StreamingLLM's generation loop evicts before appending the new token: the S+R
    cached entries include the query itself (lengen/extrapolation/lambda_mask.py)."""
    m = build_method("sinks:n_global=4,window=2000", ROPE)
    r = m.relative_positions(torch.tensor([[9000]]), torch.tensor([[0, 3, 4, 7000, 7001, 9000]]))[0, 0]
    assert r[:2].tolist() == [2003, 2000] and r[2:4].isnan().all() and r[4:].tolist() == [1999, 0]


def test_self_extend_capacity():
    for L, W, G, cap in [(4096, 1024, 8, 25600), (2048, 512, 4, 6656)]:
        m = build_method(f"self_extend:group={G},window={W}", ROPE)
        r = m.relative_positions(torch.tensor([[cap - 1]]), torch.tensor([[0]]))
        assert r.item() <= L - 1 < m.relative_positions(torch.tensor([[cap + G]]), torch.tensor([[0]])).item()


# ---- identity properties --------------------------------------------------------------------------
def plain_rope_attention(q, k, v, pos, inv_freq):
    q = apply_rotary(q, *rope_cos_sin(pos, inv_freq))
    k = apply_rotary(k, *rope_cos_sin(pos, inv_freq))
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("spec", [
    "rerope:window=53,block=8", "rerope:window=1000,block=8", "leaky_rerope:window=5,factor=1,block=8",
    "self_extend:group=4,window=53,block=8", "self_extend:group=1,window=3,block=8",
    "lambda:n_global=2,window=53,block=8", "sinks:n_global=2,window=60,block=8", "dynamic:factor=8",
    "rope",
])
def test_identity_with_plain_rope(spec, fused):
    q, k, v = qkv(T=53)
    pos = torch.arange(53)[None]
    inv_freq = build_method("rope", ROPE).rope_params(53)[0]
    ref = plain_rope_attention(q, k, v, pos, inv_freq)
    torch.testing.assert_close(build_method(spec, ROPE).attend(q, k, v, pos, pos), ref, atol=1e-6, rtol=1e-6)


def test_remapping_changes_attention_beyond_the_window():
    q, k, v = qkv(T=53)
    pos = torch.arange(53)[None]
    ref = plain_rope_attention(q, k, v, pos, build_method("rope", ROPE).rope_params(53)[0])
    for spec in ["rerope:window=8", "leaky_rerope:window=8,factor=4", "self_extend:group=4,window=8",
                 "lambda:n_global=2,window=8", "sinks:n_global=2,window=8"]:
        out = build_method(spec, ROPE).attend(q, k, v, pos, pos)
        torch.testing.assert_close(out[:, :, :8], ref[:, :, :8], atol=1e-6, rtol=1e-6)  # all within window
        assert (out[:, :, 9:] - ref[:, :, 9:]).abs().max() > 1e-3, spec


# ---- memory: no T x T intermediate ------------------------------------------------------------
@pytest.mark.parametrize("spec", ["rerope:window=40,block=32", "self_extend:group=4,window=40,block=32",
                                  "lambda:n_global=4,window=40,block=32"])
@pytest.mark.parametrize("layout", ["arange", "irregular"])
def test_no_quadratic_intermediate(spec, layout, fused, monkeypatch):
    T, block, chunk = 400, 32, 64
    monkeypatch.setattr(lse_attention, "KEY_CHUNK", chunk)
    biggest = [0]
    flash, matmul = lse_attention._FLASH_CPU, lse_attention._matmul_attention

    def flash_spy(q, k, v, dropout, causal, attn_mask=None, scale=None):
        if attn_mask is not None:
            biggest[0] = max(biggest[0], attn_mask.shape[-2] * attn_mask.shape[-1])
        return flash(q, k, v, dropout, causal, attn_mask=attn_mask, scale=scale)

    def matmul_spy(q, k, v, scale, mask):
        biggest[0] = max(biggest[0], q.shape[-2] * k.shape[-2])  # the score matrix per head
        return matmul(q, k, v, scale, mask)

    monkeypatch.setattr(lse_attention, "_FLASH_CPU", flash_spy)
    monkeypatch.setattr(lse_attention, "_matmul_attention", matmul_spy)
    pos = torch.arange(T)[None] if layout == "arange" else torch.arange(0, 2 * T, 2)[None]
    q, k, v = qkv(B=1, H=2, T=T)
    build_method(spec, ROPE).attend(q, k, v, pos, pos)
    # the fused kernel blocks internally; what we hand it (masks) and the matmul scores stay small
    assert biggest[0] <= block * (block + 40 + chunk) < T * T // 20
    assert fused or biggest[0] > 0
