"""The public API: spec parsing and composition, attend vs rotate_qk, grouped-query attention,
and the un-rotated KV cache (incremental decoding == full forward for every method)."""

import pytest
import torch
import torch.nn.functional as F

from lengen.encodings.rope import apply_rotary, rope_cos_sin
from lengen.errors import LengenError
from lengen.extrapolation import METHODS, ComposedMethod, RawKVCache, RopeSpec, build_method, parse_spec

ROPE = RopeSpec(rotary_dim=16, base=10000.0, train_length=16)
D = 16

ALL_SPECS = [
    "rope", "pi:factor=2", "ntk:factor=2", "dynamic:factor=4", "yarn:factor=4", "llama3:factor=4",
    "rerope:window=5,block=4", "leaky_rerope:window=5,factor=4,block=4", "self_extend:group=3,window=5,block=4",
    "lambda:n_global=2,window=6,block=4", "sinks:n_global=2,window=6,block=4", "logn",
    "dynamic:factor=4+self_extend:group=2,window=4,block=4+logn", "yarn:factor=4+rerope:window=5,block=4+logn",
]


def qkv(B=1, H=2, Hk=None, T=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, Hk or H, T, D, generator=g, dtype=torch.float64) for _ in range(2))
    return q, k, v


# ---- specs -------------------------------------------------------------------------------------
def test_parse_spec():
    assert parse_spec("rope") == [("rope", {})]
    assert parse_spec("yarn:factor=4,beta_fast=32,truncate=false") == [
        ("yarn", {"factor": 4, "beta_fast": 32, "truncate": False})]
    assert parse_spec("rerope:window=128+logn") == [("rerope", {"window": 128}), ("logn", {})]
    assert parse_spec("pi:factor=1e+1 + logn") == [("pi", {"factor": 10.0}), ("logn", {})]
    assert parse_spec("yarn:attention_factor=none")[0][1] == {"attention_factor": None}


def test_registry_and_build():
    assert set(METHODS.names()) == {"rope", "pi", "ntk", "dynamic", "yarn", "llama3", "rerope",
                                    "leaky_rerope", "self_extend", "lambda", "sinks", "logn"}
    m = build_method("yarn:factor=4+rerope:window=8+logn", ROPE)
    assert isinstance(m, ComposedMethod) and m.remaps and str(m) == "yarn:factor=4+rerope:window=8+logn"
    assert build_method(str(m), ROPE).rope_params(10)[1] == m.rope_params(10)[1]
    assert not build_method("dynamic:factor=2+logn", ROPE).remaps
    assert build_method("dynamic:factor=2+logn", ROPE).length_dependent
    assert str(build_method(None, ROPE)) == "rope"


@pytest.mark.parametrize("spec,message", [
    ("nope", "valid: rope, pi"),
    ("pi", "factor is required"),
    ("pi:factor=2+yarn:factor=2", "two frequency methods"),
    ("rerope+self_extend", "two remap methods"),
    ("rerope:windw=3", "valid: window, block"),
    ("rerope:window", "expected key=value"),
    ("self_extend:group=0", "bad options"),
    ("rerope:block=0", "block must be >= 1"),
])
def test_bad_specs_raise_lengen_error(spec, message):
    with pytest.raises(LengenError, match=message):
        build_method(spec, ROPE)


def test_defaults_come_from_the_rope_spec():
    rope = RopeSpec(64, 10000.0, 4096)
    assert build_method("rerope", rope).window == 1024
    assert build_method("leaky_rerope", rope).window == 1024
    assert build_method("self_extend", rope).window == 1024 and build_method("self_extend", rope).group == 8
    assert (build_method("lambda", rope).window, build_method("lambda", rope).n_global) == (4096, 10)
    assert (build_method("sinks", rope).window, build_method("sinks", rope).n_global) == (4092, 4)
    assert build_method("rerope:train_length=512", rope).window == 128


# ---- attend / rotate_qk -----------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["rope", "yarn:factor=4+logn", "dynamic:factor=4", "llama3:factor=4"])
def test_rotate_qk_then_sdpa_equals_attend(spec):
    m = build_method(spec, ROPE)
    q, k, v = qkv()
    pos = torch.arange(30)[None]
    qr, kr = m.rotate_qk(q, k, pos, pos)
    inv_freq, af = m.rope_params(30)
    cos, sin = rope_cos_sin(pos, inv_freq, af)
    scale = m.query_scale(pos)
    torch.testing.assert_close(qr, apply_rotary(q, cos, sin) * (1 if scale is None else scale.double()))
    torch.testing.assert_close(kr, apply_rotary(k, cos, sin))
    ref = F.scaled_dot_product_attention(qr, kr, v, is_causal=True)
    torch.testing.assert_close(m.attend(q, k, v, pos, pos), ref)


def test_attention_factor_scales_logits_by_its_square():
    m = build_method("yarn:factor=4", ROPE)
    q, k, _ = qkv()
    pos = torch.arange(30)[None]
    qr, kr = m.rotate_qk(q, k, pos, pos)
    inv_freq, af = m.rope_params(30)
    q0, k0 = (apply_rotary(x, *rope_cos_sin(pos, inv_freq)) for x in (q, k))
    logits = af ** 2 * (q0 @ k0.transpose(-1, -2))  # cos * af is rounded to float32
    torch.testing.assert_close(qr @ kr.transpose(-1, -2), logits, atol=1e-5, rtol=1e-5)


def test_remapping_methods_refuse_rotate_qk():
    q, k, _ = qkv()
    with pytest.raises(LengenError, match="attend"):
        build_method("rerope+logn", ROPE).rotate_qk(q, k, torch.arange(30)[None], torch.arange(30)[None])


@pytest.mark.parametrize("spec", ["rope", "rerope:window=5,block=4", "lambda:n_global=2,window=6,block=4"])
def test_grouped_query_attention(spec):
    m = build_method(spec, ROPE)
    q, k, v = qkv(H=4, Hk=2)
    pos = torch.arange(30)[None]
    expanded = m.attend(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), pos, pos)
    torch.testing.assert_close(m.attend(q, k, v, pos, pos), expanded)


def test_custom_scale_and_batch_positions():
    m = build_method("self_extend:group=2,window=4,block=4", ROPE)
    q, k, v = qkv(B=2)
    pos = torch.stack([torch.arange(30), torch.arange(30) + 7])
    out = m.attend(q, k, v, pos, pos, scale=0.3)
    for b in range(2):
        one = m.attend(q[b:b + 1], k[b:b + 1], v[b:b + 1], pos[b:b + 1], pos[b:b + 1], scale=0.3)
        torch.testing.assert_close(out[b:b + 1], one)


# ---- KV cache: incremental decoding == full forward -----------------------------------------
@pytest.mark.parametrize("spec", ALL_SPECS)
def test_incremental_decoding_equals_full_forward(spec):
    """Prefill 9 tokens, then one token at a time: every output equals the last rows of a full
    forward over the tokens so far (dynamic NTK: same total length, same frequencies)."""
    m = build_method(spec, ROPE)
    q, k, v = qkv(T=30, Hk=1)
    pos = torch.arange(30)[None]
    cache = RawKVCache()
    steps = [(0, 9)] + [(t, t + 1) for t in range(9, 30)]
    for a, b in steps:
        k_all, v_all, pos_all = cache.update(0, k[:, :, a:b], v[:, :, a:b], pos[:, a:b])
        out = m.attend(q[:, :, a:b], k_all, v_all, pos[:, a:b], pos_all)
        full = m.attend(q[:, :, :b], k[:, :, :b], v[:, :, :b], pos[:, :b], pos[:, :b])
        torch.testing.assert_close(out, full[:, :, a:b], atol=1e-10, rtol=1e-10)
    assert len(cache) == 30 and torch.equal(cache.update(0, k[:, :, :0], v[:, :, :0], pos[:, :0])[0], k)


def test_dynamic_frequencies_follow_the_total_length():
    m = build_method("dynamic:factor=4", ROPE)
    q, k, v = qkv(T=30)
    pos = torch.arange(30)[None]
    short = m.attend(q[:, :, :20], k[:, :, :20], v[:, :, :20], pos[:, :20], pos[:, :20])
    long = m.attend(q, k, v, pos, pos)[:, :, :20]
    assert (short - long).abs().max() > 1e-4  # 20 vs 30 tokens: different bases
    same = m.attend(q[:, :, :20], k[:, :, :20], v[:, :, :20], pos[:, :20], pos[:, :20], seq_len=30)
    torch.testing.assert_close(same, long)


def test_relative_positions_of_any_method():
    pos_q, pos_k = torch.tensor([[6]]), torch.arange(8)[None]
    plain = build_method("yarn:factor=2+logn", ROPE).relative_positions(pos_q, pos_k)[0, 0]
    assert plain[:7].tolist() == [6, 5, 4, 3, 2, 1, 0] and plain[7].isnan()
    composed = build_method("pi:factor=2+rerope:window=3", ROPE).relative_positions(pos_q, pos_k)[0, 0]
    assert composed[:7].tolist() == [3, 3, 3, 3, 2, 1, 0]
