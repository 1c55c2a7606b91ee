"""The fused CPU attention kernel (lengen.kernels) against a float64 reference and torch SDPA:
outputs and every gradient (q, k, v, bias with broadcast dims), head dims 8 and 72 (v dim 8) and a
few others, bias or not, causal or not, Tq == Tk and Tq < Tk, odd lengths; the dispatch and the
fallback; and the CHE model with the kernel on and off."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys

import pytest
import torch

from lengen import kernels
from lengen.kernels import small_attention as sa

if sa._compiler() is None:  # no compiler: the kernel cannot exist here, SDPA is what runs
    pytestmark = pytest.mark.skip(reason="no C++ compiler: the fused kernel cannot be built")


@pytest.fixture(scope="module", autouse=True)
def built():
    # A compiler is there, so the build must succeed: fail loudly rather than test the fallback.
    assert kernels.available(), sa._lib_error
    kernels.set_enabled(True)
    yield


@pytest.fixture
def kernel_only(monkeypatch):
    """Make any silent fallback to SDPA an error."""

    def boom(*args, **kwargs):
        raise AssertionError("fell back to torch SDPA")

    monkeypatch.setattr(sa, "sdpa", boom)


def reference(q, k, v, bias, causal, scale):
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        s = s + bias.double()
    if causal:
        s = s + sa.causal_additive_mask(q.shape[-2], k.shape[-2], "cpu", torch.float64)
    return torch.softmax(s, dim=-1) @ v


def make(B, H, Tq, Tk, D, DV, bias_shape, seed=0, requires_grad=True):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Tq, D, generator=g)
    k = torch.randn(B, H, Tk, D, generator=g)
    v = torch.randn(B, H, Tk, DV, generator=g)
    bias = None if bias_shape is None else torch.randn(*bias_shape, generator=g)
    ts = [q, k, v] + ([bias] if bias is not None else [])
    for t in ts:
        t.requires_grad_(requires_grad)
    return q, k, v, bias, ts


def check_against_reference(q, k, v, bias, ts, causal, scale, atol=2e-5):
    out = sa.fused_attention(q, k, v, bias=bias, causal=causal, scale=scale)
    ref = reference(q, k, v, bias, causal, scale)
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=1e-4)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad(out, ts, dout)
    want = torch.autograd.grad(ref, ts, dout.double())
    for name, a, b in zip("qkvb", got, want):
        assert a.shape == b.shape, name
        tol = atol * (1 + b.abs().max().item())
        torch.testing.assert_close(a.double(), b.double(), atol=tol, rtol=1e-4, msg=lambda m: f"grad {name}: {m}")
    return out


LENGTHS = [(1, 1), (3, 3), (41, 41), (80, 80), (257, 257), (1, 41), (3, 80), (41, 257)]


@pytest.mark.parametrize("dims", [(8, 8), (72, 8)], ids=["d8", "d72v8"])
@pytest.mark.parametrize("tq,tk", LENGTHS, ids=[f"{a}x{b}" for a, b in LENGTHS])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("bias", [None, "shared", "per-batch"])
def test_matches_float64_reference(kernel_only, dims, tq, tk, causal, bias):
    D, DV = dims
    B, H = (3, 2) if tk <= 80 else (1, 2)
    bias_shape = {None: None, "shared": (1, H, tq, tk), "per-batch": (B, H, tq, tk)}[bias]
    q, k, v, b, ts = make(B, H, tq, tk, D, DV, bias_shape, seed=tq * 1000 + tk)
    check_against_reference(q, k, v, b, ts, causal, 1 / math.sqrt(8))


@pytest.mark.parametrize("dims", [(1, 1), (5, 7), (16, 16), (20, 3), (32, 32), (64, 64), (100, 24)])
def test_other_head_dims(kernel_only, dims):
    D, DV = dims
    for causal, bias_shape in ((False, None), (True, (1, 2, 19, 37))):
        q, k, v, b, ts = make(2, 2, 19, 37, D, DV, bias_shape, seed=D)
        check_against_reference(q, k, v, b, ts, causal, 1 / math.sqrt(D))


@pytest.mark.parametrize("shape", [(37,), (19, 37), (2, 19, 37), (1, 1, 19, 37), (3, 1, 19, 37), (1, 2, 19, 1)])
def test_bias_broadcast_shapes(kernel_only, shape):
    """Any bias that broadcasts to [B, H, Tq, Tk]; its gradient sums over the broadcast dims."""
    q, k, v, b, ts = make(3, 2, 19, 37, 8, 8, shape, seed=len(shape))
    check_against_reference(q, k, v, b, ts, True, 0.4)


def test_bias_with_masked_keys(kernel_only):
    """-inf entries (a padding mask) get probability 0 and no gradient."""
    q, k, v, _, _ = make(2, 2, 9, 23, 8, 8, None)
    bias = torch.randn(2, 1, 9, 23)
    bias[:, :, :, 17:] = float("-inf")
    bias.requires_grad_()
    check_against_reference(q, k, v, bias, [q, k, v, bias], False, 0.35)
    (gb,) = torch.autograd.grad(sa.fused_attention(q, k, v, bias, scale=0.35).sum(), bias)
    assert torch.all(gb[..., 17:] == 0)


def test_strided_inputs(kernel_only):
    """q, k, v as SelfAttention.project makes them: permuted views of one [B, T, 3, H, hd] tensor."""
    B, T, H, hd = 3, 41, 8, 8
    qkv = torch.randn(B, T, 3 * H * hd).view(B, T, 3, H, hd).permute(2, 0, 3, 1, 4).detach().requires_grad_()
    q, k, v = qkv
    dout = torch.randn(B, H, T, hd)
    out = kernels.attention(q, k, v, scale=0.35)
    (g,) = torch.autograd.grad(out, qkv, dout)
    ref = reference(q, k, v, None, False, 0.35)
    (g_ref,) = torch.autograd.grad(ref, qkv, dout.double())
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(g.double(), g_ref.double(), atol=5e-5, rtol=1e-4)


def test_agrees_with_sdpa():
    q, k, v, b, _ = make(3, 8, 41, 41, 8, 8, (1, 8, 41, 41), requires_grad=False)
    for bias in (None, b):
        for causal in (False, True):
            got = kernels.attention(q, k, v, bias=bias, causal=causal, scale=0.35)
            want = sa.sdpa(q, k, v, bias, causal, 0.35)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_default_scale_and_modes(kernel_only):
    q, k, v, _, _ = make(1, 2, 5, 5, 8, 8, None, requires_grad=False)
    out = kernels.attention(q, k, v)  # scale 1/sqrt(8)
    torch.testing.assert_close(out.double(), reference(q, k, v, None, False, 1 / math.sqrt(8)), atol=1e-5, rtol=1e-4)
    with torch.inference_mode():
        out2 = kernels.attention(q, k, v)
    assert torch.equal(out, out2)
    q.requires_grad_()
    with torch.no_grad():
        assert not kernels.attention(q, k, v).requires_grad


def test_exp2_and_transpose_hooks():
    import ctypes

    import numpy as np

    lanes = sa._lib.lengen_attn_lanes()
    x = np.arange(lanes * lanes, dtype=np.float32)
    sa._lib.lengen_attn_test_transpose(ctypes.c_void_p(x.ctypes.data))
    assert np.array_equal(x.reshape(lanes, lanes), np.arange(lanes * lanes, dtype=np.float32).reshape(lanes, lanes).T)
    xs = np.concatenate([np.linspace(-125, 0, lanes * 4000, dtype=np.float32), np.full(lanes, -np.inf, np.float32),
                         np.full(lanes, -1000.0, np.float32)])
    y = xs.copy()
    sa._lib.lengen_attn_test_exp2(ctypes.c_void_p(y.ctypes.data), ctypes.c_int64(len(y)))
    want = np.exp2(xs[: lanes * 4000].astype(np.float64))
    assert np.max(np.abs(y[: lanes * 4000] - want) / want) < 5e-7
    assert np.all(y[lanes * 4000:] == 0)


# -- dispatch and fallback ----------------------------------------------------------------------

def test_fallback_for_unsupported_inputs(caplog):
    q, k, v, b, ts = make(2, 2, 7, 7, 8, 8, (1, 2, 7, 7))
    sa._logged.clear()
    with caplog.at_level(logging.INFO, logger="lengen.kernels"):
        for _ in range(2):
            out = kernels.attention(q.double(), k.double(), v.double(), bias=b.double(), causal=True, scale=0.3)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, reference(q, k, v, b, True, 0.3))
    assert sum("float32" in r.getMessage() for r in caplog.records) == 1  # logged once
    out.sum().backward()  # the fallback is differentiable too
    assert q.grad is not None and b.grad is not None


def test_dispatch_prefers_sdpa_for_few_queries(monkeypatch):
    """Decoding-like shapes (a few queries, many keys) go to SDPA; training/eval shapes do not."""
    calls = []
    monkeypatch.setattr(sa, "sdpa", lambda *a, **kw: calls.append(a[0].shape) or torch.zeros(()))
    for tq, tk, d in ((1, 100, 8), (7, 100, 8), (15, 100, 64)):
        kernels.attention(torch.randn(1, 2, tq, d), torch.randn(1, 2, tk, d), torch.randn(1, 2, tk, d))
    assert len(calls) == 3
    for tq, tk, d in ((1, 1, 8), (3, 3, 8), (8, 100, 8), (16, 100, 64), (41, 41, 72)):
        kernels.attention(torch.randn(1, 2, tq, d), torch.randn(1, 2, tk, d), torch.randn(1, 2, tk, 8))
    assert len(calls) == 3


def test_fused_attention_refuses_unsupported():
    with pytest.raises(ValueError):
        sa.fused_attention(*(torch.randn(1, 2, 3, 8, dtype=torch.float64) for _ in range(3)))


def test_disabled_is_exactly_sdpa():
    q, k, v, b, _ = make(2, 2, 7, 11, 8, 8, (1, 2, 7, 11), requires_grad=False)
    try:
        kernels.set_enabled(False)
        for bias in (None, b):
            for causal in (False, True):
                assert torch.equal(kernels.attention(q, k, v, bias=bias, causal=causal, scale=0.3),
                                   sa.sdpa(q, k, v, bias, causal, 0.3))
    finally:
        kernels.set_enabled(True)


def test_env_var_disables():
    code = "from lengen import kernels; print(kernels.is_enabled())"
    env = dict(os.environ, LENGEN_KERNELS="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_build_is_cached():
    path = kernels.build()
    assert path.exists() and path.parent == sa.build_dir()
    assert kernels.build() == path


# -- the model ----------------------------------------------------------------------------------

def _encodings():
    from lengen.encodings import ENCODINGS

    return ENCODINGS.names()


@pytest.mark.parametrize("pe,causal", [(pe, False) for pe in _encodings()] +
                         [(pe, True) for pe in ("rope", "alibi", "relative", "t5")])
def test_che_model_kernel_on_off(pe, causal):
    """Every registered encoding (learnable biases included) trains the same with the kernel."""
    from lengen.models import CHEModel, ModelConfig

    if pe not in _encodings():
        pytest.skip(f"no encoding {pe!r}")
    cfg = ModelConfig(pe=pe, causal=causal, dropout=0.0, num_layers=2, train_tokens=20)
    torch.manual_seed(0)
    model = CHEModel(cfg, 3, 3)
    inputs = torch.randint(0, 3, (4, 11))
    results = []
    for flag in (False, True):
        kernels.set_enabled(flag)
        model.zero_grad()
        logits = model(inputs, 9)
        logits.square().mean().backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    kernels.set_enabled(True)
    (a, ga), (b, gb) = results
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert len(ga) == len(gb)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("bias_kind", ["per-model keys", "shared pe + per-model keys", "per-model learned"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kind", ["stacked", "folded"])
def test_stacked_attention_under_vmap(request, bias_kind, causal, kind):
    """lengen.kernels.model_stack: one model's attention inside torch.func.vmap over a stack of N
    models equals the float64 reference of each model, outputs and every gradient, with padded
    keys (-inf) that differ per model, and no vmap fallback warning. Both stack attentions: the
    fused kernel per model (CPU) and one SDPA call with the models folded into the heads (CUDA)."""
    import warnings

    from torch.func import vmap

    from lengen.kernels import model_stack

    if kind == "stacked":
        request.getfixturevalue("kernel_only")  # the fused kernel, never a fallback
    stacked_attention = model_stack.stacked_attention if kind == "stacked" else model_stack.folded_attention

    N, B, H, T, D = 3, 2, 2, 7, 8
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(N, B, H, T, D, generator=g).requires_grad_() for _ in range(3))
    keys = torch.zeros(N, T)
    keys[0, 5:] = float("-inf")
    keys[2, 3:] = float("-inf")
    learned = torch.randn(N, H, T, T, generator=g).requires_grad_()
    shared = torch.randn(H, T, T, generator=g)

    def bias_of(keys_i, learned_i):
        mask = keys_i[None, None, None, :]
        if bias_kind == "per-model keys":
            return mask
        return mask + (shared if bias_kind.startswith("shared") else learned_i)

    def one(q_i, k_i, v_i, keys_i, learned_i):
        return stacked_attention(q_i, k_i, v_i, bias=bias_of(keys_i, learned_i), causal=causal, scale=0.3)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # vmap's slow per-slice fallback warns
        out = vmap(one)(q, k, v, keys, learned)
    ref = torch.stack([reference(q[i], k[i], v[i], bias_of(keys[i], learned[i]), causal, 0.3) for i in range(N)])
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    dout = torch.randn(out.shape, generator=g)
    wrt = (q, k, v, learned) if bias_kind == "per-model learned" else (q, k, v)
    for a, b in zip(torch.autograd.grad(out, wrt, dout), torch.autograd.grad(ref, wrt, dout.double())):
        torch.testing.assert_close(a.double(), b.double(), atol=1e-4, rtol=1e-4)
    # padded keys get no gradient
    dk = torch.autograd.grad(vmap(one)(q, k, v, keys, learned), k, dout)[0]
    assert dk[0, :, :, 5:].abs().max() == 0 and dk[2, :, :, 3:].abs().max() == 0


@pytest.mark.parametrize("kind", ["stacked", "folded"])
def test_stack_attention_outside_vmap_matches_the_reference(kind):
    """Called on one model's plain tensors (no vmap), a stack attention is the ordinary attention,
    its gradients recomputed through the kernel: q, k, v and a learned bias."""
    from lengen.kernels import model_stack

    fn = model_stack.stacked_attention if kind == "stacked" else model_stack.folded_attention
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 6, 8, generator=g).requires_grad_() for _ in range(3))
    bias = torch.randn(1, 2, 6, 6, generator=g).requires_grad_()
    out = fn(q, k, v, bias=bias, causal=True, scale=0.4)
    ref = reference(q, k, v, bias, True, 0.4)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    dout = torch.randn(out.shape, generator=g)
    for a, b in zip(torch.autograd.grad(out, (q, k, v, bias), dout),
                    torch.autograd.grad(ref, (q, k, v, bias), dout.double())):
        torch.testing.assert_close(a.double(), b.double(), atol=1e-4, rtol=1e-4)
