"""Attention variants: log-n logit scaling (three forms) and key normalisation, checked against
hand-written attention and their defining properties."""

import math

import pytest
import torch

from lengen.encodings import build_encoding
from lengen.errors import LengenError
from lengen.models import CHEModel, ModelConfig, Transformer
from lengen.models.attention import AttentionContext, SelfAttention
from lengen.models.logit_scaling import LOGIT_SCALES, logit_scale_factor

M = 20  # training length m


def cfg(**kw):
    base = dict(num_layers=1, num_heads=2, d_model=16, d_ff=32, dropout=0.0, train_tokens=M)
    base.update(kw)
    return ModelConfig(**base)


def factor(mode, n, tq=None, causal=False):
    return logit_scale_factor(cfg(logit_scale=mode, causal=causal), torch.zeros(1, tq or n), n)


# -- the factor ---------------------------------------------------------------------------------

def test_log_n_is_one_at_training_length_and_grows():
    assert factor("log_n", M) == 1.0 and factor("log_n_clipped", M) == 1.0
    values = [factor("log_n", n) for n in range(1, 200)]
    assert all(b > a for a, b in zip(values, values[1:]))
    assert math.isclose(factor("log_n", 400), math.log(400) / math.log(20))
    assert factor("log_n", 5) < 1  # log_m n: shorter sequences get a flatter softmax


def test_log_n_clipped_never_below_one():
    for n in range(1, 200):
        f = factor("log_n_clipped", n)
        assert f >= 1.0
        assert math.isclose(f, max(1.0, math.log(n) / math.log(M)))
    assert factor("none", 50) is None


def test_log_n_position_counts_the_keys_each_query_sees():
    # causal: query t (0-based) attends to t + 1 keys
    f = factor("log_n_position", 50, causal=True)
    assert f.shape == (1, 1, 50, 1)
    want = [max(1.0, math.log(t + 1) / math.log(M)) for t in range(50)]
    assert torch.allclose(f.flatten(), torch.tensor(want))
    assert torch.all(f[0, 0, :M, 0] == 1.0)
    # incremental decoding: 3 new queries at the end of 50 keys see 48, 49, 50 keys
    f = factor("log_n_position", 50, tq=3, causal=True)
    assert torch.allclose(f.flatten(), torch.tensor([math.log(n) / math.log(M) for n in (48, 49, 50)]))
    # bidirectional: every query sees all keys, so it equals log_n_clipped
    f = factor("log_n_position", 50, causal=False)
    assert torch.allclose(f, torch.tensor(factor("log_n_clipped", 50)))


def test_log_n_position_ignores_position_values():
    """Randomized positions (values up to thousands) must not change the per-query factor."""
    c = cfg(logit_scale="log_n_position", causal=True)
    a = logit_scale_factor(c, torch.arange(10)[None], 10)
    b = logit_scale_factor(c, torch.tensor([[3, 80, 90, 400, 500, 900, 1000, 1500, 1800, 2000]]), 10)
    assert torch.equal(a, b)


def test_logit_scale_config_errors():
    with pytest.raises(LengenError, match="valid: none, log_n"):
        Transformer(cfg(logit_scale="log_m"))
    with pytest.raises(LengenError, match="training length"):
        Transformer(cfg(logit_scale="log_n", train_tokens=None))


# -- inside attention ---------------------------------------------------------------------------

def naive_attention(q, k, v, scale, bias=None, causal=False):
    """softmax(scale * q.k + bias) v, written out."""
    s = scale * (q @ k.transpose(-1, -2))
    if bias is not None:
        s = s + bias
    if causal:
        T = s.shape[-1]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def run_attend(c, q, k, v, pos):
    pe = build_encoding(c)
    attn = SelfAttention(c, 0, pe)
    ctx = AttentionContext(pe.prepare(pos, pos), pos, pos, c.causal)
    return attn.attend(q, k, v, ctx), pe


@pytest.mark.parametrize("mode", ["log_n", "log_n_clipped", "log_n_position"])
@pytest.mark.parametrize("causal", [False, True])
def test_scaling_multiplies_qk_not_the_bias(mode, causal):
    torch.manual_seed(0)
    T, hd = 45, 8
    c = cfg(pe="alibi", logit_scale=mode, causal=causal)
    q, k, v = (torch.randn(2, 2, T, hd) for _ in range(3))
    pos = torch.arange(T)[None]
    out, pe = run_attend(c, q, k, v, pos)
    bias = pe.bias(0, pe.prepare(pos, pos))
    if mode == "log_n_position" and causal:
        f = torch.tensor([max(1.0, math.log(t + 1) / math.log(M)) for t in range(T)])[:, None]
    else:
        f = max(1.0, math.log(T) / math.log(M)) if mode != "log_n" else math.log(T) / math.log(M)
    want = naive_attention(q, k, v, f / math.sqrt(hd), bias, causal)
    assert torch.allclose(out, want, atol=1e-5)
    plain, _ = run_attend(cfg(pe="alibi", causal=causal), q, k, v, pos)
    assert not torch.allclose(out, plain, atol=1e-3)  # T = 45 > m = 20: the scale matters


def test_key_norm_logits_are_q_dot_unit_k():
    torch.manual_seed(0)
    c = cfg(pe="rope", key_norm=True)
    q, k, v = (torch.randn(1, 2, 9, 8) for _ in range(3))
    pos = torch.arange(9)[None]
    out, pe = run_attend(c, q, k, v, pos)
    qr, kr = pe.transform_qk(0, pe.prepare(pos, pos), q, k / k.norm(dim=-1, keepdim=True))
    assert torch.allclose(out, naive_attention(qr, kr, v, 1.0), atol=1e-5)


@pytest.mark.parametrize("pe", ["rope", "alibi", "relative", "fire"])
def test_key_norm_ignores_positive_rescaling_of_any_key(pe):
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 2, 7, 8) for _ in range(3))
    pos = torch.arange(7)[None]
    scale = torch.ones(1, 1, 7, 1)
    scale[..., 2, :], scale[..., 5, :] = 7.5, 0.01  # two keys rescaled, the others kept
    for key_norm in (True, False):
        c = cfg(pe=pe, key_norm=key_norm)
        torch.manual_seed(2)  # same encoding parameters for both calls
        a, _ = run_attend(c, q, k, v, pos)
        torch.manual_seed(2)
        b, _ = run_attend(c, q, k * scale, v, pos)
        assert torch.allclose(a, b, atol=1e-5) == key_norm


# -- a short training run with every variant ----------------------------------------------------

def last_token_task(batch, length, generator, vocab=4):
    """Random tokens; the one answer is the last input token (next to the answer slot: RoPE
    attention has to single out relative distance 1)."""
    x = torch.randint(0, vocab, (batch, length), generator=generator)
    return x, x[:, -1:]


@torch.no_grad()
def held_out(model, length, seed=1):
    """(loss, whether every answer is right) on 128 fresh examples of `length` tokens."""
    x, y = last_token_task(128, length, torch.Generator().manual_seed(seed))
    out = model.eval()(x, 1)
    model.train()
    loss = torch.nn.functional.cross_entropy(out.flatten(0, 1), y.flatten()).item()
    return loss, bool((out.argmax(-1) == y).all())


@pytest.mark.parametrize("mode", LOGIT_SCALES)
@pytest.mark.parametrize("key_norm", [False, True])
def test_variants_learn_a_positional_task_and_keep_it_past_m(mode, key_norm):
    """100 Adam steps on lengths 3..8 take the held-out loss from about ln 4 = 1.39 (measured
    1.45-1.47) to below 0.05 (measured 0.005-0.008 for every variant), and the model still answers
    every example at 20 tokens (21 keys > m = 16, where the log-n factors exceed 1)."""
    torch.manual_seed(0)
    # llama4_temperature scales NoPE layers only; with the NoPE layer last (rope,none) this 2-layer encoder
    # does not learn the task in 100 steps, with or without the temperature (loss 1.1 and 1.07 measured)
    layers = ["none", "rope"] if mode == "llama4_temperature" else None
    model = CHEModel(cfg(num_layers=2, pe="rope", layer_pe=layers, logit_scale=mode, key_norm=key_norm,
                         train_tokens=16), 4, 4)
    before, _ = held_out(model, 8)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for step in range(100):
        x, y = last_token_task(16, 3 + step % 6, gen)
        loss = torch.nn.functional.cross_entropy(model(x, 1).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    after, right = held_out(model, 8)
    assert before > 1.3 and after < 0.05 and right, (before, after)
    assert held_out(model, 20)[1]
