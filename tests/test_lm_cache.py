"""Incremental decoding with the KV cache gives the logits of a full forward pass, for every
training-free method and every encoding; methods are refused on non-RoPE models."""

import pytest
import torch

from lengen.encodings import ENCODINGS
from lengen.errors import LengenError
from lengen.extrapolation import build_method
from lengen.extrapolation import split_methods
from lengen.lm.methods import resolve_methods
from lengen.lm.model import DecoderLM
from lengen.models.config import ModelConfig
from lengen.protocols import greedy_generate_fn

TRAIN = 16   # training length: the 48-token sequences below reach 3x it
T = 48
METHODS = [
    "rope", "pi:factor=4", "ntk:factor=4", "dynamic:factor=2", "yarn:factor=4", "llama3:factor=4",
    "rerope:window=6", "rerope:window=6,block=8", "leaky_rerope:window=6,factor=4", "self_extend:group=3,window=6",
    "lambda:n_global=2,window=12", "logn", "rerope:window=6+logn", "yarn:factor=4+logn",
]
ONE_BY_ONE = [(t, t + 1) for t in range(T)]
CHUNKS = [(0, 5), (5, 17), (17, 18), (18, 33), (33, 47), (47, 48)]


def tiny(pe="rope", **kw):
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=2, num_heads=4, d_model=32, d_ff=64, dropout=0.0, norm="pre", causal=True,
                      pe=pe, embed_scale=False, train_tokens=TRAIN, max_position=256, **kw)
    model = DecoderLM(cfg, 257).eval()
    with torch.no_grad():  # larger q/k weights than the init, so positions matter in the logits
        for block in model.decoder.blocks:
            block.attn.qkv.weight.mul_(8)
    return model


@pytest.fixture(scope="module")
def rope_model():
    return tiny()


def ids(batch=2, seed=1):
    return torch.randint(0, 256, (batch, T), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def assert_incremental_matches_full(model, method, x, chunks):
    """Each chunk [a, b) fed through the cache must give the logits that a full forward over the
    first b tokens gives at positions a..b-1. By causality that is the full forward over all
    tokens, except for a length-dependent method (dynamic NTK), compared with each prefix."""
    per_prefix = getattr(method, "length_dependent", False)
    full = None if per_prefix else model(x, method=method)
    cache = model.new_cache()
    for a, b in chunks:
        got = model(x[:, a:b], cache=cache, method=method)
        want = model(x[:, :b], method=method)[:, a:b] if per_prefix else full[:, a:b]
        assert torch.allclose(got, want, atol=2e-5, rtol=1e-4), (a, b, (got - want).abs().max().item())
    assert len(cache) == chunks[-1][1]


@pytest.mark.parametrize("spec", METHODS)
def test_incremental_decoding_equals_full_forward_for_every_method(rope_model, spec):
    method = build_method(spec, rope_model.rope_spec())
    x = ids()
    assert_incremental_matches_full(rope_model, method, x, ONE_BY_ONE)
    assert_incremental_matches_full(rope_model, method, x, CHUNKS)


@pytest.mark.parametrize("pe", [n for n in ENCODINGS.names() if n != "rope"] + ["rope"])
def test_incremental_decoding_equals_full_forward_for_every_encoding(pe):
    model = tiny(pe)
    assert_incremental_matches_full(model, None, ids(), ONE_BY_ONE)
    assert_incremental_matches_full(model, None, ids(), CHUNKS)


@torch.no_grad()
def test_the_checks_can_fail(rope_model):
    """Dynamic NTK really depends on the length (a cache of rotated keys would be wrong), and
    every method changes the logits past the training length."""
    x = ids(1)
    dyn = build_method("dynamic:factor=2", rope_model.rope_spec())
    assert not torch.allclose(rope_model(x, method=dyn)[:, :TRAIN], rope_model(x[:, :TRAIN], method=dyn), atol=1e-4)
    plain = rope_model(x)
    assert torch.allclose(rope_model(x, method=build_method("rope", rope_model.rope_spec())), plain, atol=1e-6)
    for spec in METHODS[1:]:
        other = rope_model(x, method=build_method(spec, rope_model.rope_spec()))
        assert not torch.allclose(other[:, -1], plain[:, -1], atol=1e-4), spec


@torch.no_grad()
def test_generate_with_cache_equals_greedy_full_forwards(rope_model):
    prompt = ids(1)[0, :30].tolist()
    for spec in ("dynamic:factor=2", "rerope:window=6+logn"):
        method = build_method(spec, rope_model.rope_spec())
        assert rope_model.generate(prompt, 8, method) == greedy_generate_fn(rope_model.logits_fn(method))(prompt, 8)


def test_methods_only_on_rope_models():
    alibi = tiny("alibi")
    with pytest.raises(LengenError, match="RoPE"):
        resolve_methods(["pi:factor=2"], alibi)
    with pytest.raises(LengenError, match="RoPE"):
        alibi(ids(), method=build_method("pi:factor=2", tiny().rope_spec()))
    assert [m.label for m in resolve_methods(["none"], alibi)] == ["base"]
    assert [m.method for m in resolve_methods(["base"], alibi)] == [None]


def test_split_methods_keeps_options_together():
    assert split_methods("rope,yarn:factor=4,beta_fast=16,rerope:window=8+logn") == [
        "rope", "yarn:factor=4,beta_fast=16", "rerope:window=8+logn"]
    assert split_methods("rerope:block=8,window=8+logn, logn+pi:factor=2") == [
        "rerope:block=8,window=8+logn", "logn+pi:factor=2"]


def test_the_decoder_builds_the_core_attention_once_per_block(monkeypatch):
    # one attention module per block, built once: the CHE model's SelfAttention, no subclass
    from lengen.models.attention import SelfAttention

    built = []
    real = SelfAttention.__init__

    def record(self, *a, **kw):
        built.append(type(self).__name__)
        real(self, *a, **kw)

    monkeypatch.setattr(SelfAttention, "__init__", record)
    model = tiny()
    assert built == ["SelfAttention", "SelfAttention"]
    assert [type(b.attn).__name__ for b in model.decoder.blocks] == built
