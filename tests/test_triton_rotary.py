"""RoPE's one-pass rotation kernel (lengen.kernels.triton_rotary, the CUDA path of
lengen.kernels.rotary), run on the CPU by Triton's interpreter (or compiled where CUDA is), against
a float64 complex-number reference written here: pair i of x is x_i + i x_{i+d/2}, rotated by
exp(i sign theta). Also: the custom operator's fake (meta) kernel against the real one, and RoPE
models trained as a group through the kernel == trained alone eagerly."""

from __future__ import annotations

import os

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
triton = pytest.importorskip("triton")

from lengen.kernels import rotary, triton_rotary  # noqa: E402


def reference(x, theta, sign):
    """x [..., d] rotated pair by pair by sign * theta [..., d/2] (broadcast), float64."""
    h = x.shape[-1] // 2
    z = torch.complex(x[..., :h].double(), x[..., h:].double())
    z = z * torch.polar(torch.ones_like(theta, dtype=torch.float64), sign * theta.double())
    return torch.cat([z.real, z.imag], dim=-1)


def tables(theta):
    return theta.cos().float(), theta.sin().float()


def fused_projection_q(B, T, H, d, dtype, gen):
    """q as the attention takes it: [B, H, T, d], a strided view of a [B, T, 3, H, d] projection."""
    qkv = torch.randn(B, T, 3, H, d, generator=gen).to(dtype)
    return qkv[:, :, 0].transpose(1, 2)


CASES = [
    # (x's shape builder, theta's shape): theta broadcasts against x's leading dims
    ("4d-shared", lambda g, dt, d: fused_projection_q(2, 13, 3, d, dt, g), (1, 1, 13)),
    ("4d-per-row", lambda g, dt, d: fused_projection_q(2, 13, 3, d, dt, g), (2, 1, 13)),
    ("5d-stack", lambda g, dt, d: torch.randn(4, 2, 3, 9, d, generator=g).to(dt), (4, 1, 1, 9)),
    ("5d-shared-by-models", lambda g, dt, d: torch.randn(3, 2, 2, 7, d, generator=g).to(dt), (1, 2, 1, 7)),
    ("3d", lambda g, dt, d: torch.randn(5, 11, d, generator=g).to(dt), (1, 11)),
]


@pytest.mark.parametrize("d", [2, 12, 16, 64])   # 12: a half (6) that is not a power of two
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_kernel_equals_the_complex_rotation(case, dtype, d, sign):
    _, make, theta_shape = case
    gen = torch.Generator().manual_seed(d)
    x = make(gen, dtype, d)
    theta = torch.rand(*theta_shape, d // 2, generator=gen, dtype=torch.float64) * 40 - 20
    c, s = tables(theta)
    xd = x.to(DEVICE)
    out = triton_rotary.rotate(xd, c.to(DEVICE), s.to(DEVICE), sign, rotary.rotated_like(xd))
    assert out.stride() == rotary.rotate_eager(x, c, s, sign).stride()   # the CPU's layout
    out = out.cpu()
    want = reference(x, theta, sign)
    assert out.dtype == dtype and out.shape == x.shape
    # bf16: one rounding of a float32 result (the eager path rounds twice: its own tolerance)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=1e-2)
    torch.testing.assert_close(out.double(), want, **tol)


def test_rotating_back_restores_x():
    gen = torch.Generator().manual_seed(1)
    x = fused_projection_q(2, 5, 2, 8, torch.float32, gen).to(DEVICE)
    c, s = (t.to(DEVICE) for t in tables(torch.randn(1, 1, 5, 4, generator=gen)))
    there = triton_rotary.rotate(x, c, s, 1.0)
    torch.testing.assert_close(triton_rotary.rotate(there, c, s, -1.0), x, atol=1e-6, rtol=1e-6)


def test_hand_example():
    """d = 4, one row: pairs (1, 3) and (2, 4) rotated by 90 and 180 degrees."""
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], device=DEVICE)
    c = torch.tensor([[0.0, -1.0]], device=DEVICE)
    s = torch.tensor([[1.0, 0.0]], device=DEVICE)
    # pair 0: (1, 3) by 90 deg -> (-3, 1); pair 1: (2, 4) by 180 deg -> (-2, -4)
    out = triton_rotary.rotate(x, c, s, 1.0).cpu()
    assert out.tolist() == [[-3.0, -2.0, 1.0, -4.0]]


def test_empty_and_bad_shapes():
    x = torch.empty(2, 0, 3, 8, device=DEVICE)
    c = torch.empty(1, 1, 3, 4, device=DEVICE)
    assert triton_rotary.rotate(x, c, c, 1.0).shape == x.shape
    with pytest.raises(ValueError, match="d even"):
        triton_rotary.rotate(torch.zeros(2, 3, device=DEVICE, dtype=torch.float32).expand(2, 3)[..., :3],
                             c[..., :1], c[..., :1], 1.0)


def test_the_operator_fake_kernel_matches_the_real_one():
    """torch.library.opcheck: the custom operator's fake (and meta) kernel gives the real
    output's shape, dtype and strides, and the operator is registered consistently."""
    gen = torch.Generator().manual_seed(3)
    for x, theta in [(fused_projection_q(2, 6, 3, 8, torch.float32, gen), torch.randn(1, 1, 6, 4, generator=gen)),
                     (torch.randn(3, 2, 2, 5, 8, generator=gen).bfloat16(), torch.randn(3, 1, 1, 5, 4, generator=gen))]:
        c, s = tables(theta)
        torch.library.opcheck(torch.ops.lengen.rotate_halves, (x, c, s, 1.0),
                              test_utils=("test_schema", "test_faketensor"))
        meta = torch.ops.lengen.rotate_halves(x.to("meta"), c.to("meta"), s.to("meta"), 1.0)
        assert meta.stride() == rotary.rotate_eager(x, c, s, 1.0).stride()


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU models' rotation through the interpreter")
def test_rope_models_train_alike_through_the_kernel(tmp_path, monkeypatch):
    """Two tiny RoPE CHE runs trained eagerly, then as a group with every rotation (forward, and
    the backward's inverse) through the kernel under vmap: the same weights and logits."""
    from test_group_training import SEEDS_LRS, assert_matches_solo, run_group, tiny

    cfgs = [tiny("rope", seed, lr, steps=20, checkpoint_every=10) for seed, lr in SEEDS_LRS[:2]]
    calls = []
    real = triton_rotary.rotate
    monkeypatch.setattr(rotary, "fused", lambda device: True)
    monkeypatch.setattr(rotary, "rotate_eager",
                        lambda x, c, s, sign: calls.append(x.dim()) or real(x, c, s, sign, rotary.rotated_like(x)))
    records = run_group(cfgs, tmp_path)
    assert 5 in calls   # the stack's rotation reached the kernel
    monkeypatch.undo()
    # the solo runs are eager: assert_matches_solo trains them
    assert_matches_solo(cfgs, tmp_path, records)
