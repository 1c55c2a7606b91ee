"""The six core encodings against hand-written references and invariances."""

import math

import pytest
import torch

from lengen.encodings import ENCODINGS, build_encoding
from lengen.encodings.alibi import alibi_slopes
from lengen.encodings.rope import apply_rotary, default_inv_freq, rope_cos_sin
from lengen.errors import LengenError
from lengen.models import ModelConfig, Transformer


def cfg(**kw):
    base = dict(num_layers=2, num_heads=4, d_model=32, d_ff=64, dropout=0.0)
    base.update(kw)
    return ModelConfig(**base)


def attention_logits(enc, layer, q, k, pos_q, pos_k, head_dim):
    """Logits the attention would see: transformed q.k / sqrt(d) plus the bias."""
    state = enc.prepare(pos_q, pos_k)
    q2, k2 = enc.transform_qk(layer, state, q, k)
    logits = q2 @ k2.transpose(-1, -2) / math.sqrt(head_dim)
    bias = enc.bias(layer, state)
    return logits if bias is None else logits + bias


def test_alibi_slopes_golden():
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -(h + 1) for h in range(8)]))
    twelve = [2.0 ** -(h + 1) for h in range(8)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]
    assert torch.allclose(alibi_slopes(12), torch.tensor(twelve))


def test_alibi_bias_hand_written_matrix():
    enc = build_encoding(cfg(pe="alibi", num_heads=8))
    pos = torch.tensor([[0, 1, 2]])
    bias = enc.bias(0, enc.prepare(pos, pos))[0]
    m = 0.5  # head 0
    # rows: query i; cols: key j. past keys (j < i) get |i-j| - 0.5, future keys |i-j|.
    expected = -m * torch.tensor([[0.0, 1.0, 2.0], [0.5, 0.0, 1.0], [1.5, 0.5, 0.0]])
    assert torch.allclose(bias[0], expected)
    assert torch.allclose(bias[7], expected * (2.0 ** -8) / m)
    causal = build_encoding(cfg(pe="alibi", num_heads=8, causal=True))
    cb = causal.bias(0, causal.prepare(pos, pos))[0, 0]
    assert torch.allclose(cb.tril(), (-m * torch.tensor([[0.0, 0, 0], [1, 0, 0], [2, 1, 0]])))


def test_sincos_values_at_known_positions():
    enc = build_encoding(cfg(pe="sincos", d_model=4))
    x = torch.zeros(1, 3, 4)
    out = enc.embed(x, torch.tensor([[0, 1, 100]]))[0]
    # d=4: frequencies 1 and 1/100; layout [sin w0 p, sin w1 p, cos w0 p, cos w1 p]
    for row, p in zip(out, [0, 1, 100]):
        expected = torch.tensor([math.sin(p), math.sin(p / 100), math.cos(p), math.cos(p / 100)])
        assert torch.allclose(row, expected, atol=1e-5)


def test_rope_matches_rotation_matrix_loop():
    d, pos = 8, torch.tensor([[3, 7]])
    x = torch.randn(1, 1, 2, d)
    cos, sin = rope_cos_sin(pos, default_inv_freq(d))
    out = apply_rotary(x, cos, sin)
    for t, p in enumerate([3, 7]):
        for k in range(d // 2):
            theta = p * 10000 ** (-2 * k / d)
            a, b = x[0, 0, t, k], x[0, 0, t, k + d // 2]  # half-split pairs (k, k + d/2)
            assert torch.isclose(out[0, 0, t, k], a * math.cos(theta) - b * math.sin(theta), atol=1e-5)
            assert torch.isclose(out[0, 0, t, k + d // 2], a * math.sin(theta) + b * math.cos(theta), atol=1e-5)


@pytest.mark.parametrize("pe", ["rope", "relative", "alibi"])
@pytest.mark.parametrize("floats", [False, True])
def test_shift_invariance(pe, floats):
    torch.manual_seed(0)
    c = cfg(pe=pe)
    enc = build_encoding(c)
    q, k = torch.randn(2, c.num_heads, 5, c.head_dim), torch.randn(2, c.num_heads, 5, c.head_dim)
    pos = torch.tensor([[0.0, 1.5, 4.0, 9.25, 11.0]]) if floats else torch.tensor([[0, 3, 4, 8, 20]])
    shifted = pos + 37
    a = attention_logits(enc, 1, q, k, pos, pos, c.head_dim)
    b = attention_logits(enc, 1, q, k, shifted, shifted, c.head_dim)
    assert torch.allclose(a, b, atol=1e-4)
    # and positions do matter: a different spacing changes the logits
    c2 = attention_logits(enc, 1, q, k, pos * 2, pos * 2, c.head_dim)
    assert not torch.allclose(a, c2, atol=1e-3)


def test_relative_matches_naive_per_pair():
    """(q_i + u).k_j + (q_i + v).W_r R(p_j - p_i), R = [sin | cos] of the difference."""
    torch.manual_seed(1)
    c = cfg(pe="relative")
    enc = build_encoding(c)
    with torch.no_grad():
        enc.u.normal_()
        enc.v.normal_()
    H, hd, r = c.num_heads, c.head_dim, enc.rel_dim
    q, k = torch.randn(1, H, 4, hd), torch.randn(1, H, 4, hd)
    pos = torch.tensor([[2, 5, 6, 30]])
    got = attention_logits(enc, 1, q, k, pos, pos, hd) * math.sqrt(hd)
    inv = 10000 ** (-torch.arange(0, r, 2).float() / r)
    expected = torch.zeros(1, H, 4, 4)
    for h in range(H):
        W = enc.w_r[1, h]  # [hd, r]
        for i in range(4):
            for j in range(4):
                delta = float(pos[0, j] - pos[0, i])
                R = torch.cat([torch.sin(delta * inv), torch.cos(delta * inv)])
                content = (q[0, h, i] + enc.u[1, h]) @ k[0, h, j]
                position = (q[0, h, i] + enc.v[1, h]) @ (W @ R)
                expected[0, h, i, j] = content + position
    assert torch.allclose(got, expected, atol=1e-4)


def test_learned_table_rejects_bad_positions():
    enc = build_encoding(cfg(pe="learned", max_position=16))
    with pytest.raises(LengenError, match="16 rows"):
        enc.check_positions(torch.tensor([[0, 5, 16]]))
    with pytest.raises(LengenError, match="integer"):
        enc.check_positions(torch.tensor([[0.0, 0.5]]))
    enc.check_positions(torch.tensor([[0, 15]]))


def test_unknown_encoding_lists_valid_names():
    with pytest.raises(LengenError, match="valid: .*rope"):
        build_encoding(cfg(pe="nope"))


@pytest.mark.parametrize("pe", ENCODINGS.names())
def test_every_encoding_runs_on_per_sample_positions(pe):
    """[B, T] positions (one row per sample) give the same result per row as [1, T] alone."""
    torch.manual_seed(2)
    model = Transformer(cfg(pe=pe)).eval()
    x = torch.randn(2, 6, 32)
    rows = torch.tensor([[0, 1, 2, 3, 4, 5], [3, 9, 10, 20, 21, 40]])
    both = model(x, rows)
    for b in range(2):
        alone = model(x[b : b + 1], rows[b : b + 1])
        assert torch.allclose(both[b], alone[0], atol=1e-5)
