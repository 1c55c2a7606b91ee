"""The public API: spec parsing and composition, attend vs rotate_qk, grouped-query attention,
and the un-rotated KV cache (incremental decoding == full forward for every method)."""

import math
import re

import pytest
import torch
import torch.nn.functional as F

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
                                    "leaky_rerope", "self_extend", "lambda", "sinks", "logn", "dca", "string",
                                    "longrope", "dpe", "dope"}
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


# ---- attend / rotate_qk against rotations and attention written out in the test ---------------
THETA = [10000.0 ** (-2 * i / D) for i in range(D // 2)]  # default frequencies, d = 16, b = 1e4
YARN_AF = 0.1 * math.log(4) + 1  # 1.1386294361: yarn's attention factor for s = 4 (multiplies cos, sin)


def by_ramp(ramp):
    """YaRN's blend theta_i (1 - ramp_i) + (theta_i / 4) ramp_i for factor 4."""
    return [t * (1 - r) + t / 4 * r for t, r in zip(THETA, ramp)]


# (frequencies, attention factor, log-n?) worked out by hand from the methods' papers' formulas
# (docs/training_free.md, "Formulas as implemented") for ROPE (d = 16, b = 1e4, L0 = 16) and 30 tokens.
HAND = {
    "rope": (THETA, 1.0, False),
    # yarn, L0 = 16: dim(32) = 16 ln(16 / 64pi) / (2 ln 1e4) = -2.198 -> floor -3 -> clamp 0,
    # dim(1) = 0.812 -> ceil 1: ramp_i = min(i, 1), i.e. only the fastest pair keeps theta_0.
    "yarn:factor=4+logn": (by_ramp([0, 1, 1, 1, 1, 1, 1, 1]), YARN_AF, True),
    # yarn, L0 = 1024: dim(32) = 1.414 -> 1, dim(1) = 4.424 -> 5: ramp_i = clip((i - 1) / 4, 0, 1).
    "yarn:factor=4,train_length=1024": (by_ramp([0, 0, 0.25, 0.5, 0.75, 1, 1, 1]), YARN_AF, False),
    # dynamic at seq_len = max(pos) + 1 = 30 > L0 = 16: alpha = 4 * 30 / 16 - 3 = 4.5,
    # b' = 1e4 * 4.5^(16/14), inv_freq_i = b'^(-2i/16).
    "dynamic:factor=4": ([(1e4 * 4.5 ** (16 / 14)) ** (-2 * i / D) for i in range(D // 2)], 1.0, False),
    # llama3, L0 = 16, lf = 1, hf = 4: wavelength 2 pi / theta_i = 6.28, 19.9, 62.8, ...;
    # i = 0 lies in [L0/hf, L0/lf] = [4, 16]: a = (16 / 2pi - 1) / 3, (1 - a) / 4 + a = 2 / pi;
    # every other wavelength exceeds 16: theta_i / 4.
    "llama3:factor=4": ([2 / math.pi] + [t / 4 for t in THETA[1:]], 1.0, False),
}


def rotate_by_hand(x, positions, inv_freq, factor=1.0):
    """Half-split layout (Hugging Face's rotate_half): channel i pairs with channel i + d/2, and
    the pair (x_i, x_{i+d/2}) at position p is multiplied by the 2x2 rotation matrix
    [[cos a, -sin a], [sin a, cos a]], a = p * inv_freq[i], then by the attention factor."""
    h = x.shape[-1] // 2
    out = torch.empty_like(x)
    for t, p in enumerate(positions):
        for i, w in enumerate(inv_freq):
            c, s = math.cos(p * w), math.sin(p * w)
            rot = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
            pair = torch.stack([x[..., t, i], x[..., t, i + h]], -1)       # [B, H, 2]
            new = pair @ rot.T
            out[..., t, i], out[..., t, i + h] = factor * new[..., 0], factor * new[..., 1]
    return out


def logn_by_hand(positions, train_length=16):
    return torch.tensor([max(1.0, math.log(p + 1) / math.log(train_length)) for p in positions],
                        dtype=torch.float64)[:, None]


def causal_softmax_attention(q, k, v, scale):
    """float64 softmax(scale q.k) v over keys j <= i, written out."""
    logits = scale * torch.einsum("bhid,bhjd->bhij", q.double(), k.double())
    T = logits.shape[-1]
    logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    weights = logits.exp() / logits.exp().sum(-1, keepdim=True)
    return torch.einsum("bhij,bhjd->bhid", weights, v.double())


# The library computes the angles p * inv_freq in float32 (as HF does): angles up to 29 rad carry
# an absolute error up to ~29 * 2^-23 = 3.5e-6 rad, so entries of size ~3 differ from the float64
# rotation by up to 2.5e-6 (measured); 1e-5 leaves 4x headroom.
ANGLE_TOL = {"atol": 1e-5, "rtol": 1e-5}


@pytest.mark.parametrize("spec", list(HAND))
def test_rotate_qk_and_attend_equal_rotations_written_out(spec):
    m = build_method(spec, ROPE)
    inv_freq, factor, logn = HAND[spec]
    q, k, v = qkv()
    pos = torch.arange(30)[None]
    qr, kr = m.rotate_qk(q, k, pos, pos)
    want_q = rotate_by_hand(q, range(30), inv_freq, factor)
    if logn:  # log-n: query at position p times max(1, ln(p + 1) / ln L0)
        want_q = want_q * logn_by_hand(range(30))
    want_k = rotate_by_hand(k, range(30), inv_freq, factor)
    torch.testing.assert_close(qr, want_q, **ANGLE_TOL)
    torch.testing.assert_close(kr, want_k, **ANGLE_TOL)
    want = causal_softmax_attention(want_q, want_k, v, D ** -0.5)
    torch.testing.assert_close(m.attend(q, k, v, pos, pos), want, **ANGLE_TOL)
    # and a caller's own SDPA on rotate_qk's output gives the same attention
    torch.testing.assert_close(F.scaled_dot_product_attention(qr, kr, v, is_causal=True), want, **ANGLE_TOL)


def test_attention_factor_scales_logits_by_its_square():
    """yarn multiplies cos and sin of both q and k by 0.1 ln 4 + 1, so every logit is the
    unscaled rotated logit times 1.2964769928 (the value in the reference notes)."""
    assert YARN_AF ** 2 == pytest.approx(1.2964769928, abs=1e-10)
    m = build_method("yarn:factor=4", ROPE)
    inv_freq = by_ramp([0, 1, 1, 1, 1, 1, 1, 1])  # as worked out for HAND["yarn:factor=4+logn"]
    q, k, v = qkv()
    pos = torch.arange(30)[None]
    qr, kr = m.rotate_qk(q, k, pos, pos)
    q0, k0 = rotate_by_hand(q, range(30), inv_freq), rotate_by_hand(k, range(30), inv_freq)
    unscaled = q0 @ k0.transpose(-1, -2)
    torch.testing.assert_close(qr @ kr.transpose(-1, -2), 1.2964769928 * unscaled, atol=1e-4, rtol=1e-5)
    want = causal_softmax_attention(q0, k0, v, 1.2964769928 * D ** -0.5)
    torch.testing.assert_close(m.attend(q, k, v, pos, pos), want, **ANGLE_TOL)
    unfactored = causal_softmax_attention(q0, k0, v, D ** -0.5)
    assert (want - unfactored).abs().max() > 1e-2  # the factor does change the attention


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


# the largest window each method may have at L0 = 16, from its map r(i, j) (module docstrings):
# rerope / lambda: near pairs up to window - 1, far ones at r = window: window <= L0 (r = L0, one past
# the largest trained distance, as LM-Infinite's default); leaky_rerope / self_extend: far pairs start
# at r = window and grow, so window < L0; sinks: far distances up to n_global + window - 1 <= L0 - 1;
# string: near distances up to shift - 1, shift <= L0; dca: r <= chunk_size <= L0
WINDOW_LIMITS = [("rerope:window={}", 16), ("lambda:window={}", 16), ("leaky_rerope:window={}", 15),
                 ("self_extend:window={}", 15), ("sinks:n_global=4,window={}", 12), ("string:shift={},window=2", 16),
                 ("dca:chunk_size={},local_size=2", 16)]


@pytest.mark.parametrize("spec,limit", WINDOW_LIMITS)
def test_check_window_refuses_a_window_past_the_trained_length(spec, limit):
    from lengen.extrapolation import check_window

    check_window(spec.format(limit), ROPE)   # the boundary: accepted
    check_window(spec.format(limit) + "+logn", ROPE)
    with pytest.raises(LengenError, match=rf"^{re.escape(spec.format(limit + 1))}: the \w+ \({limit + 1}\) must be "
                                          rf"<= {limit} for a model trained on 16 tokens"):
        check_window(spec.format(limit + 1), ROPE)
    # the spec's own train_length, and a frequency method beside it (its factor stretches the range)
    check_window(spec.format(limit + 1) + ",train_length=32", ROPE)
    check_window("yarn:factor=4+" + spec.format(limit + 1), ROPE)


def test_check_window_passes_frequency_methods_and_defaults():
    from lengen.extrapolation import check_window

    for spec in ["yarn:factor=4", "pi:factor=2", "logn", "rerope", "leaky_rerope", "self_extend", "lambda", "sinks",
                 "string", "dca"]:
        check_window(spec, ROPE)
