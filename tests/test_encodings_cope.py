"""CoPE (Golovneva et al. 2024, arXiv 2405.18719) against an independent per-pair computation of
the paper's equations in float64 (explicit loops, written here), forward and gradient, causal and
bidirectional, the reference note's hand-checked examples, the KV cache, and its refusals."""

import math

import pytest
import torch

from lengen.encodings import build_encoding
from lengen.encodings.base import PositionalEncoding
from lengen.errors import LengenError
from lengen.lm.methods import resolve_methods
from lengen.lm.model import DecoderLM
from lengen.models import CHEModel, ModelConfig
from lengen.models.attention import AttentionContext, SelfAttention
from lengen.positions import build_sampler
from lengen.reports.lm_aggregate import encoding_label, variant_label


def cfg(**kw):
    base = dict(num_layers=2, num_heads=2, d_model=8, d_ff=16, dropout=0.0, pe="cope", train_tokens=6)
    base.update(kw)
    return ModelConfig(**base)


def attend(c, enc, q, k, v, layer=1):
    att = SelfAttention(c, layer, enc)
    pos = torch.arange(q.shape[-2])[None]
    return att.attend(q, k, v, AttentionContext(enc.prepare(pos, pos), pos, pos, c.causal))


def reference(q, k, v, e, npos, causal, factor=None, e_right=None):
    """Per (b, h, i, j), float64 scalars: g_ij = sigmoid(s q_i.k_j) (eq. 3, the official code's
    1/sqrt(d) inside), p_ij = sum of g_it for t from j to i (eq. 4; bidirectional: t between i and
    j), clamped to npos-1, z = q_i.e[t] interpolated between floor and ceil (eq. 5, the weight
    differentiable, the indices not; bidirectional keys j > i read e_right), logits
    s (q_i.k_j + z_ij) (eq. 6), softmax, values. `factor(i)`: a per-query logit-scaling factor
    multiplying s."""
    B, H, T, d = q.shape
    out = torch.zeros(B, H, T, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                s = 1 / math.sqrt(d) * (1.0 if factor is None else factor(i))
                keys = range(i + 1) if causal else range(T)
                g = [torch.sigmoid(s * torch.dot(q[b, h, i], k[b, h, t])) for t in range(T)]
                logits = []
                for j in keys:
                    between = range(j, i + 1) if j <= i else range(i, j + 1)
                    p = sum(g[t] for t in between)
                    p = torch.clamp(p, max=npos - 1)
                    lo, hi = math.floor(p.item()), math.ceil(p.item())
                    table = e_right if j > i else e
                    z_lo, z_hi = torch.dot(q[b, h, i], table[:, lo]), torch.dot(q[b, h, i], table[:, hi])
                    z = (p - lo) * z_hi + (1 - (p - lo)) * z_lo
                    logits.append(s * (torch.dot(q[b, h, i], k[b, h, j]) + z))
                a = torch.softmax(torch.stack(logits), 0)
                out[b, h, i] = sum(a[n] * v[b, h, j] for n, j in enumerate(keys))
    return out


def inputs(c, T, seed=0, gain=2.0):
    g = torch.Generator().manual_seed(seed)
    shape = (2, c.num_heads, T, c.head_dim)
    return [gain * torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(3)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("npos", [None, 3])  # default train_tokens + 1 = 7, and a clamp at 2
def test_forward_and_gradient_match_the_per_pair_reference(causal, npos):
    c = cfg(causal=causal, pe_options={} if npos is None else {"npos": npos})
    enc = build_encoding(c).double()
    assert enc.npos == (7 if npos is None else 3)
    assert (enc.pos_emb_right is None) == causal  # bidirectional: a table for keys right of the query
    tables = [enc.pos_emb] + ([] if causal else [enc.pos_emb_right])
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for t in tables:
            t.copy_(torch.randn(t.shape, generator=g, dtype=torch.float64))
    T = 6
    q, k, v = (t.requires_grad_() for t in inputs(c, T))
    w = torch.randn(2, c.num_heads, T, c.head_dim, generator=g, dtype=torch.float64)
    got = attend(c, enc, q, k, v)
    (got * w).sum().backward()
    mine = [t.grad.clone() for t in (q, k, v)] + [t.grad[1].clone() for t in tables]
    for t in (q, k, v):
        t.grad = None
    es = [t.detach()[1].clone().requires_grad_() for t in tables]
    want = reference(q, k, v, es[0], enc.npos, causal, e_right=None if causal else es[1])
    (want * w).sum().backward()
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
    for a, b in zip(mine, [q.grad, k.grad, v.grad] + [e.grad for e in es]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)
    for t, e in zip(tables, es):
        assert t.grad[0].abs().sum() == 0  # layer 0's table is not layer 1's
        assert e.grad.abs().sum() > 0


@pytest.mark.parametrize("logit_scale,factor", [
    ("log_n_position", lambda i: max(1.0, math.log(i + 1) / math.log(4))),  # per query: q is scaled
    ("log_n", lambda i: math.log(9) / math.log(4)),                          # one factor on the scale
])
def test_float32_kernel_path_and_logit_scaling_match_the_reference(logit_scale, factor):
    """float32 through the fused CPU kernel (or SDPA), with log-n scaling (m = 4, 9 keys): the
    gates and z see the scaled logit."""
    c = cfg(causal=True, logit_scale=logit_scale, train_tokens=4)
    enc = build_encoding(c)
    with torch.no_grad():
        enc.pos_emb.copy_(torch.randn(enc.pos_emb.shape, generator=torch.Generator().manual_seed(3)))
    q, k, v = inputs(c, 9, seed=1)
    got = attend(c, enc, q.float(), k.float(), v.float())
    want = reference(q, k, v, enc.pos_emb.detach()[1].double(), enc.npos, True, factor=factor)
    torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=1e-4)


def test_reference_note_examples():
    """Golovneva et al. via the reference note: q.k = 0 gives every gate 0.5, so the query i = 5
    sees the keys j = 0..5 at p = 3.0, 2.5, 2.0, 1.5, 1.0, 0.5; with z = q.e = [0, 10, 20, 30]
    (npos 4) p = 2.5 interpolates to 25. Here z[t] = 10 t, so z_ij = 10 p_ij, and the logits are
    z / sqrt(d)."""
    c = cfg(num_heads=1, d_model=4, causal=True, pe_options={"npos": 4})
    enc = build_encoding(c)
    with torch.no_grad():
        enc.pos_emb.zero_()
        enc.pos_emb[0, 0] = torch.tensor([0.0, 10.0, 20.0, 30.0])
    q = torch.tensor([1.0, 0, 0, 0]).expand(1, 1, 6, 4)
    k = torch.tensor([0.0, 1, 0, 0]).expand(1, 1, 6, 4)
    bias = enc.qk_bias(0, None, q, k, 0.5, True)
    assert torch.allclose(bias[0, 0, 5] / 0.5, torch.tensor([30.0, 25, 20, 15, 10, 5]))
    # p_22 = g_22 = 0.5 on the diagonal, in (0, 1)
    assert torch.allclose(bias[0, 0].diagonal() / 0.5, torch.full((6,), 5.0))


def test_stubbed_gates_count_what_is_gated():
    """Gates [1, 0, 1, 0, 1, 1] (saturated sigmoids) give p = [4, 3, 3, 2, 2, 1] for the last
    query; with z[t] = t the bias reads p back."""
    c = cfg(num_heads=1, d_model=4, causal=True, pe_options={"npos": 8})
    enc = build_encoding(c)
    with torch.no_grad():
        enc.pos_emb.zero_()
        enc.pos_emb[0, 3] = torch.arange(8.0)  # q's 4th channel reads z[t] = t
    gate = [1, 0, 1, 0, 1, 1]
    q = torch.tensor([[100.0, 0, 0, 1]] * 6)[None, None]
    k = torch.tensor([[1.0 if g else -1.0, 0, 0, 0] for g in gate])[None, None]
    bias = enc.qk_bias(0, None, q, k, 1.0, True)
    assert torch.allclose(bias[0, 0, 5], torch.tensor([4.0, 3, 3, 2, 2, 1]), atol=1e-5)


def test_bidirectional_counts_from_the_query_in_both_directions():
    """Keys left of the query (and itself) read e[t] = t, keys right of it e'[t] = -t: the bias
    is the count, with the sign of the side."""
    c = cfg(num_heads=1, d_model=4, causal=False, pe_options={"npos": 8})
    enc = build_encoding(c)
    with torch.no_grad():
        enc.pos_emb.zero_()
        enc.pos_emb[0, 3] = torch.arange(8.0)
        enc.pos_emb_right.zero_()
        enc.pos_emb_right[0, 3] = -torch.arange(8.0)
    gate = [1, 0, 1, 0, 1, 1]
    q = torch.tensor([[100.0, 0, 0, 1]] * 6)[None, None]
    k = torch.tensor([[1.0 if g else -1.0, 0, 0, 0] for g in gate])[None, None]
    bias = enc.qk_bias(0, None, q, k, 1.0, False)[0, 0]
    # query 2: left keys 0, 1 count gates 0..2 and 1..2; right keys 3, 4, 5 count 2..j
    assert torch.allclose(bias[2], torch.tensor([2.0, 1, 1, -1, -2, -3]), atol=1e-5)
    assert torch.allclose(bias[0], torch.tensor([1.0, -1, -2, -2, -3, -4]), atol=1e-5)
    assert torch.allclose(bias[5], torch.tensor([4.0, 3, 3, 2, 2, 1]), atol=1e-5)  # the causal row


def test_every_other_encoding_has_no_qk_bias():
    assert PositionalEncoding.qk_bias is build_encoding(cfg(pe="rope")).qk_bias.__func__


def test_positions_are_not_read():
    """Counts come from content and token order: every sampler gives the same output."""
    torch.manual_seed(0)
    model = CHEModel(cfg(max_position=64), 4, 4).eval()
    with torch.no_grad():
        for t in model.encoder.pe.parameters():
            t.normal_()
    x = torch.randint(0, 4, (3, 5))
    a = model(x, 3, torch.arange(8)[None])
    b = model(x, 3, build_sampler("randomized", max_position=64)(8, torch.Generator().manual_seed(0)))
    torch.testing.assert_close(a, b)


@torch.no_grad()
def test_kv_cache_decoding_equals_the_full_forward():
    """The gate cumsum of a new query runs over every cached key: one token at a time and in
    chunks equal the full forward, past npos too (train_tokens 8: positions clamp at 8)."""
    torch.manual_seed(0)
    c = ModelConfig(num_layers=2, num_heads=4, d_model=32, d_ff=64, dropout=0.0, norm="pre", causal=True,
                    pe="cope", train_tokens=8, embed_scale=False)
    model = DecoderLM(c, 50).eval()
    for block in model.decoder.blocks:
        block.attn.qkv.weight.mul_(8)
    model.decoder.pe.pos_emb.normal_(std=2.0)
    x = torch.randint(0, 50, (2, 30), generator=torch.Generator().manual_seed(1))
    full = model(x)
    plain = model.decoder.pe.pos_emb.clone()
    model.decoder.pe.pos_emb.zero_()
    assert not torch.allclose(model(x), full, atol=1e-3)  # the table matters
    model.decoder.pe.pos_emb.copy_(plain)
    for chunks in ([(t, t + 1) for t in range(30)], [(0, 7), (7, 8), (8, 21), (21, 30)]):
        cache = model.new_cache()
        for a, b in chunks:
            torch.testing.assert_close(model(x[:, a:b], cache=cache), full[:, a:b], atol=2e-5, rtol=1e-4)


def test_refusals():
    with pytest.raises(LengenError, match="npos"):
        build_encoding(cfg(pe_options={"npos": 1}))
    with pytest.raises(LengenError, match="npos"):
        build_encoding(cfg(pe_options={"npos": 2.5}))
    model = DecoderLM(cfg(causal=True), 10)
    with pytest.raises(LengenError, match="RoPE"):
        resolve_methods(["yarn:factor=2"], model)
    assert [m.label for m in resolve_methods(["rope"], model)] == ["base"]


def test_report_label():
    assert encoding_label("cope") == "CoPE"
    assert variant_label("cope", "base") == "CoPE"


def test_query_blocks_without_autograd_equal_one_block(monkeypatch):
    """Evaluation splits the queries into blocks to bound memory; each row is independent, so
    blocks of 1, 2 and 3 rows (the last one short) give the one-block bias, causal or not."""
    import lengen.encodings.cope as cope

    for causal in (True, False):
        c = cfg(causal=causal, pe_options={"npos": 4})
        enc = build_encoding(c)
        with torch.no_grad():
            for t in enc.parameters():
                t.normal_()
        q, k, _ = (t.float() for t in inputs(c, 7, seed=2))
        for tq in (7, 3):  # all queries, and the last 3 of 7 keys (a KV cache)
            want = enc.qk_bias(1, None, q[..., -tq:, :], k, 0.3, causal)
            for rows in (1, 2, 3):
                monkeypatch.setattr(cope, "CHUNK_ELEMENTS", 2 * c.num_heads * 7 * rows)
                with torch.no_grad():
                    got = enc.qk_bias(1, None, q[..., -tq:, :], k, 0.3, causal)
                torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)  # matmul blocking rounds
                monkeypatch.setattr(cope, "CHUNK_ELEMENTS", 1 << 24)


def test_query_blocks_without_autograd_under_vmap(monkeypatch):
    """A stack of models (torch.func.vmap over stacked tables, as grouped training runs the
    hooks) takes the same blocked path without autograd: each member's bias equals the one-block
    bias of that member alone, with no test of whether q is batched."""
    import lengen.encodings.cope as cope
    from torch.func import functional_call, stack_module_state, vmap

    class Bias(torch.nn.Module):  # qk_bias as a forward, for functional_call
        def __init__(self, enc):
            super().__init__()
            self.enc = enc

        def forward(self, q, k):
            return self.enc.qk_bias(1, None, q, k, 0.3, True)

    c = cfg(pe_options={"npos": 4})
    members = [Bias(build_encoding(c)) for _ in range(3)]
    with torch.no_grad():
        for m in members:
            for t in m.parameters():
                t.normal_()
    q, k, _ = (t.float() for t in inputs(c, 7, seed=3))
    want = [m(q, k).detach() for m in members]
    params, buffers = stack_module_state(members)
    monkeypatch.setattr(cope, "CHUNK_ELEMENTS", 2 * c.num_heads * 7 * 2)   # blocks of 2 query rows
    with torch.no_grad():
        got = vmap(lambda p, b: functional_call(members[0], (p, b), (q, k)))(params, buffers)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_layer_pattern_sends_cope_to_its_layers():
    """--layer-pe cope,none: layer 0 adds CoPE's bias, layer 1 none; the pattern forwards qk_bias."""
    c = cfg(layer_pe=["cope", "none"], causal=True)
    enc = build_encoding(c)
    cope = enc.for_layer(0)
    with torch.no_grad():
        cope.pos_emb.normal_()
    q, k, v = (t.float() for t in inputs(c, 5))
    state = enc.prepare(torch.arange(5)[None], torch.arange(5)[None])
    torch.testing.assert_close(enc.qk_bias(0, state, q, k, 0.5, True), cope.qk_bias(0, None, q, k, 0.5, True))
    assert enc.qk_bias(1, state, q, k, 0.5, True) is None
    got = attend(c, enc, q, k, v, layer=0)
    want = reference(q.double(), k.double(), v.double(), cope.pos_emb.detach()[0].double(), cope.npos, True)
    torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=1e-4)
