"""The hand-written backward passes on the training hot path (RoPE's rotation of q and k, the
split of the fused qkv projection into heads) against autograd through independent references."""

import math

import pytest
import torch

from lengen.encodings.rope import _RotatePair, default_inv_freq, rope_cos_sin, rotate_pair
from lengen.kernels.heads import split_heads


def rotation_matrices(pos, d, base=10000.0):
    """[B, T, d, d] matrices R with R @ x = RoPE(x) in the half-split layout (channel k pairs
    with k + d/2), built entry by entry from the angle p * base^(-2k/d)."""
    B, T = pos.shape
    R = torch.zeros(B, T, d, d, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            for k in range(d // 2):
                a = float(pos[b, t]) * base ** (-2 * k / d)
                c, s = math.cos(a), math.sin(a)
                R[b, t, k, k], R[b, t, k, k + d // 2] = c, -s
                R[b, t, k + d // 2, k], R[b, t, k + d // 2, k + d // 2] = s, c
    return R


@pytest.mark.parametrize("per_sample", [False, True])
def test_rotate_pair_values_and_gradients_match_rotation_matrices(per_sample):
    torch.manual_seed(0)
    B, H, T, d = 3, 2, 5, 8
    pos_q = torch.tensor([[0.0, 1.0, 2.5, 7.0, 40.0]]).expand(B if per_sample else 1, T).clone()
    if per_sample:
        pos_q[1] += 3.0
        pos_q[2] *= 2.0
    pos_k = pos_q + 11.0   # other positions for the keys
    # the fused q, k come as strided views (heads of a fused projection), as in the model
    qkv = torch.randn(B, T, 3, H, d, requires_grad=True)
    q, k = qkv.permute(2, 0, 3, 1, 4)[:2]
    inv = default_inv_freq(d)
    out_q, out_k = rotate_pair(q, k, *rope_cos_sin(pos_q, inv), *rope_cos_sin(pos_k, inv))
    gq, gk = torch.randn_like(out_q), torch.randn_like(out_k)
    (dqkv,) = torch.autograd.grad([out_q, out_k], [qkv], [gq, gk])

    ref_in = qkv.detach().double().requires_grad_()
    rq, rk = ref_in.permute(2, 0, 3, 1, 4)[:2]
    Rq = rotation_matrices(pos_q.expand(B, T), d)[:, None]   # [B, 1, T, d, d]
    Rk = rotation_matrices(pos_k.expand(B, T), d)[:, None]
    ref_q = (Rq @ rq[..., None])[..., 0]
    ref_k = (Rk @ rk[..., None])[..., 0]
    (ref_grad,) = torch.autograd.grad([ref_q, ref_k], [ref_in], [gq.double(), gk.double()])
    assert torch.allclose(out_q.double(), ref_q, atol=1e-5)
    assert torch.allclose(out_k.double(), ref_k, atol=1e-5)
    assert torch.allclose(dqkv.double(), ref_grad, atol=1e-5)
    assert dqkv[:, :, 2].abs().max() == 0   # v's slice untouched


@pytest.mark.parametrize("tables_per_model", [False, True])
def test_rotate_pair_under_vmap_matches_rotation_matrices_per_model(tables_per_model, monkeypatch):
    """A group of models (torch.func.vmap over the model axis): the Function's own vmap rule
    rotates the stack, values and gradients equal to each model's rotation matrices, with the
    tables shared by the models (positions of one batch) or each model's own (in_dims 0)."""
    calls = []
    real_vmap = _RotatePair.vmap
    monkeypatch.setattr(_RotatePair, "vmap", staticmethod(lambda *a: calls.append(1) or real_vmap(*a)))
    torch.manual_seed(3)
    N, B, H, T, d = 3, 2, 2, 5, 8
    inv = default_inv_freq(d)
    pos = torch.tensor([[0.0, 1.0, 2.0, 5.0, 9.0]]).expand(N, 1, T).clone()
    if tables_per_model:
        pos[1] += 4.0
        pos[2] *= 3.0
    q = torch.randn(N, B, H, T, d, requires_grad=True)
    k = torch.randn(N, B, H, T, d, requires_grad=True)

    def one(qi, ki, pi):
        cos, sin = rope_cos_sin(pi, inv)
        return rotate_pair(qi, ki, cos, sin, cos, sin)

    in_dims = (0, 0, 0 if tables_per_model else None)
    out_q, out_k = torch.func.vmap(one, in_dims=in_dims)(q, k, pos if tables_per_model else pos[0])
    assert calls, "the vmap rule did not run"
    gq, gk = torch.randn_like(out_q), torch.randn_like(out_k)
    dq, dk = torch.autograd.grad([out_q, out_k], [q, k], [gq, gk])
    for i in range(N):
        R = rotation_matrices(pos[i].expand(B, T), d)[:, None]   # [B, 1, T, d, d]
        rq, rk = (t[i].detach().double().requires_grad_() for t in (q, k))
        ref_q, ref_k = (R @ rq[..., None])[..., 0], (R @ rk[..., None])[..., 0]
        ref_dq, ref_dk = torch.autograd.grad([ref_q, ref_k], [rq, rk], [gq[i].double(), gk[i].double()])
        for got, ref in ((out_q[i], ref_q), (out_k[i], ref_k), (dq[i], ref_dq), (dk[i], ref_dk)):
            assert torch.allclose(got.double(), ref, atol=1e-5)


def test_rotate_pair_gradcheck_float64():
    torch.manual_seed(1)
    q = torch.randn(2, 2, 4, 6, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 4, 6, dtype=torch.float64, requires_grad=True)
    angles = torch.rand(1, 1, 4, 3, dtype=torch.float64) * 6
    assert torch.autograd.gradcheck(lambda a, b: _RotatePair.apply(a, b, angles.cos(), angles.sin(),
                                                                   (2 * angles).cos(), (2 * angles).sin()),
                                    (q, k))


def test_split_heads_matches_view_permute_in_values_and_gradients():
    torch.manual_seed(2)
    B, T, H, d = 2, 5, 3, 4
    x = torch.randn(B, T, 3 * H * d, requires_grad=True)
    weights = [torch.randn(B, H, T, d) for _ in range(3)]
    q, k, v = split_heads(x, H)
    (grad,) = torch.autograd.grad(sum((t * w).sum() for t, w in zip((q, k, v), weights)), [x])
    ref_x = x.detach().clone().requires_grad_()
    rq, rk, rv = (ref_x[..., i * H * d:(i + 1) * H * d].reshape(B, T, H, d).transpose(1, 2) for i in range(3))
    (ref,) = torch.autograd.grad(sum((t * w).sum() for t, w in zip((rq, rk, rv), weights)), [ref_x])
    for a, b in zip((q, k, v), (rq, rk, rv)):
        assert torch.equal(a, b)
    assert torch.equal(grad, ref)
