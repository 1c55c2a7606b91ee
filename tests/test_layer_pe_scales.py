"""Per-layer encodings (ModelConfig.layer_pe), Llama 4's attention temperature on NoPE layers and
SSMax (Scalable-Softmax): checked against float64 attention written out here (explicit formulas
from the papers / HF Llama 4, not lengen's helpers), the reference note's hand values, the KV
cache, RoPE methods, training many models at once, the command line, sweeps and report labels."""

import math
import subprocess
import sys

import pytest
import torch

from lengen.errors import LengenError
from lengen.lm.methods import resolve_methods
from lengen.lm.model import DecoderLM
from lengen.models import CHEModel, ModelConfig, Transformer
from lengen.models.attention import AttentionContext
from lengen.models.logit_scaling import logit_scale_factor
from lengen.reports import che_aggregate as aggregate
from lengen.reports.lm_aggregate import layer_pattern_label
from lengen.reports.lm_aggregate import variant_label
from lengen.sweeps import run_id
from lengen.che.config import TrainConfig

H, D, T = 2, 16, 7


def cfg(**kw):
    base = dict(num_layers=2, num_heads=H, d_model=D, d_ff=32, dropout=0.0, train_tokens=20)
    base.update(kw)
    return ModelConfig(**base)


# -- float64 references, written out ------------------------------------------------------------

def rope64(x, pos, base=10000.0):
    """Half-split RoPE (channel i pairs with i + d/2), angle pos * base^(-2i/d), explicit loops."""
    d = x.shape[-1]
    out = x.clone()
    for i in range(d // 2):
        theta = pos * base ** (-2.0 * i / d)
        c, s = torch.cos(theta), torch.sin(theta)
        a, b = x[..., i], x[..., i + d // 2]
        out[..., i] = a * c - b * s
        out[..., i + d // 2] = b * c + a * s
    return out


def attention64(attn, x, *, rope=False, causal=False, query_factor=None, base=10000.0):
    """The attention module's output in float64, one (query, key) pair at a time:
    softmax_j(f_hi q_i.k_j / sqrt(hd) [+ causal mask]) v, then the output projection.
    `query_factor(h, i, n_i)` is the per-query factor, n_i the keys query i sees."""
    B, T_, _ = x.shape
    hd = D // H
    qkv = (x.double() @ attn.qkv.weight.double().T).view(B, T_, 3, H, hd)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [B, T, H, hd]
    if rope:
        pos = torch.arange(T_, dtype=torch.float64)[None, :, None]
        q = rope64(q, pos, base)
        k = rope64(k, pos, base)
    out = torch.zeros(B, T_, H, hd, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(T_):
                keys = range(i + 1) if causal else range(T_)
                n = len(keys)
                f = 1.0 if query_factor is None else query_factor(h, i, n)
                logits = torch.stack([f * (q[b, i, h] @ k[b, j, h]) / math.sqrt(hd) for j in keys])
                p = torch.softmax(logits, 0)
                out[b, i, h] = sum(p[t] * v[b, j, h] for t, j in enumerate(keys))
    return out.reshape(B, T_, D) @ attn.out.weight.double().T


def layer_outputs(model: Transformer, x, pos=None):
    """Each attention module's output on the same input x (not chained), float32."""
    pos = torch.arange(x.shape[1])[None] if pos is None else pos
    ctx = AttentionContext(model.pe.prepare(pos, pos), pos, pos, model.cfg.causal)
    return [block.attn(x, ctx) for block in model.blocks]


def llama4_factor(c, floor_scale, attn_scale=0.1):
    """HF Llama4TextAttention: 1 + attn_scale * log(floor((cache_position + 1) / floor_scale) + 1)."""
    return 1.0 + attn_scale * math.log(math.floor((c + 1) / floor_scale) + 1.0)


# -- Llama 4 temperature --------------------------------------------------------------------------

@pytest.mark.parametrize("floor_scale,positions,want", [
    (8192, [0, 8190, 8191, 16383, 131071], [1.0, 1.0, 1.069315, 1.109861, 1.283321]),
    (2, [0, 1, 2, 3, 4, 5], [1.0, 1.069315, 1.069315, 1.109861, 1.109861, 1.138629]),
])
def test_llama4_temperature_reference_note_values(floor_scale, positions, want):
    """The reference note's values: one query at absolute index c after c keys (a KV cache)."""
    c = cfg(pe="none", causal=True, logit_scale="llama4_temperature",
            logit_scale_options={"floor_scale": floor_scale})
    for p, w in zip(positions, want):
        f = logit_scale_factor(c, torch.zeros(1, 1), p + 1)
        assert f.shape == (1, 1, 1, 1)
        assert f.item() == pytest.approx(w, abs=1e-6), p


@pytest.mark.parametrize("causal", [True, False])
def test_llama4_temperature_scales_nope_layers_only(causal):
    torch.manual_seed(0)
    model = Transformer(cfg(layer_pe=["rope", "none"], causal=causal, logit_scale="llama4_temperature",
                            logit_scale_options={"floor_scale": 2, "attn_scale": 0.3}))
    x = torch.randn(2, T, D, requires_grad=True)
    rope_out, nope_out = layer_outputs(model, x)
    # RoPE layer: no factor
    want_rope = attention64(model.blocks[0].attn, x, rope=True, causal=causal)
    torch.testing.assert_close(rope_out.double(), want_rope, atol=1e-5, rtol=1e-5)
    # NoPE layer: query i (seeing n_i = i + 1 keys, causal; all T keys otherwise) scaled
    f = (lambda h, i, n: llama4_factor(i, 2, 0.3)) if causal else (lambda h, i, n: 1 + 0.3 * math.log1p(n // 2))
    want = attention64(model.blocks[1].attn, x, causal=causal, query_factor=f)
    torch.testing.assert_close(nope_out.double(), want, atol=1e-5, rtol=1e-5)
    # gradient through the scaled layer, against the float64 reference's
    w = torch.randn_like(nope_out)
    g, = torch.autograd.grad((nope_out * w).sum(), x)
    x64 = x.detach().double().requires_grad_(True)
    g64, = torch.autograd.grad((attention64(model.blocks[1].attn, x64, causal=causal, query_factor=f) * w.double())
                               .sum(), x64)
    torch.testing.assert_close(g.double(), g64, atol=1e-5, rtol=1e-4)


def test_llama4_temperature_default_floor_is_an_eighth_of_the_training_length():
    c = cfg(pe="none", causal=True, logit_scale="llama4_temperature", train_tokens=80)
    f = logit_scale_factor(c, torch.zeros(1, 100), 100).flatten()
    assert [f[i].item() for i in (8, 9, 79, 99)] == pytest.approx(
        [1.0, llama4_factor(9, 10), llama4_factor(79, 10), llama4_factor(99, 10)], abs=1e-6)


# -- SSMax ------------------------------------------------------------------------------------------

def test_ssmax_reference_note_example():
    """z = [-2]*5 + [3], n = 6, s = 0.43: factor 0.770457, p_max 0.9040 (softmax: 0.9674)."""
    c = cfg(logit_scale="ssmax")
    f = logit_scale_factor(c, torch.zeros(1, 6), 6, ssmax_s=torch.tensor([0.43, 1.0]))
    assert f.shape == (1, 2, 1, 1)
    assert f[0, 0].item() == pytest.approx(0.770457, abs=1e-6)
    z = torch.tensor([-2.0] * 5 + [3.0])
    assert torch.softmax(f[0, 0, 0] * z, 0)[-1].item() == pytest.approx(0.9040, abs=1e-4)
    # causal, s = 1: log(i + 1) for the 6 queries
    c = cfg(logit_scale="ssmax", causal=True)
    f = logit_scale_factor(c, torch.zeros(1, 6), 6, ssmax_s=torch.ones(2))
    assert f[0, 0, :, 0].tolist() == pytest.approx([0, 0.6931, 1.0986, 1.3863, 1.6094, 1.7918], abs=1e-4)


@pytest.mark.parametrize("causal", [True, False])
def test_ssmax_forward_and_gradient_against_float64(causal):
    torch.manual_seed(0)
    model = Transformer(cfg(pe="none", causal=causal, logit_scale="ssmax"))
    attn = model.blocks[0].attn
    assert attn.ssmax_s.tolist() == pytest.approx([1 / math.log(20)] * H)  # default init: 1 / log m
    with torch.no_grad():
        attn.ssmax_s.copy_(torch.tensor([0.43, 1.3]))
    x = torch.randn(2, T, D, requires_grad=True)
    out = layer_outputs(model, x)[0]

    def ref(s):  # SSMax eq. 3: softmax((s_h log n_i) z)
        return attention64(attn, x.detach().double(), causal=causal,
                           query_factor=lambda h, i, n: s[h] * math.log(n))

    s64 = attn.ssmax_s.detach().double().requires_grad_(True)
    want = ref(s64)
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5)
    w = torch.randn_like(out)
    g, = torch.autograd.grad((out * w).sum(), attn.ssmax_s)
    g64, = torch.autograd.grad((want * w.double()).sum(), s64)
    torch.testing.assert_close(g.double(), g64, atol=1e-5, rtol=1e-4)
    assert g.abs().min() > 0  # both heads' s learn


def test_ssmax_s_init_option_and_per_layer_parameters():
    model = CHEModel(cfg(logit_scale="ssmax", logit_scale_options={"s_init": 0.43}), 4, 4)
    names = [n for n, _ in model.named_parameters() if "ssmax" in n]
    assert names == ["encoder.blocks.0.attn.ssmax_s", "encoder.blocks.1.attn.ssmax_s"]
    assert model.encoder.blocks[1].attn.ssmax_s.tolist() == pytest.approx([0.43, 0.43])


# -- per-layer encodings -----------------------------------------------------------------------------

def test_pattern_repeats_like_llama4_no_rope_layers():
    """HF Llama 4: no_rope_layers[l] = int((l + 1) % no_rope_layer_interval != 0), 1 = RoPE."""
    c = cfg(num_layers=8, layer_pe="rope,rope,rope,none")
    assert c.layer_pe == ["rope", "rope", "rope", "none"]
    want = ["rope" if (l + 1) % 4 != 0 else "none" for l in range(8)]
    assert [c.layer_encoding(l) for l in range(8)] == want
    model = Transformer(c)
    assert [type(model.pe.for_layer(l)).__name__ for l in range(8)] == \
        ["RopeEncoding" if w == "rope" else "NoEncoding" for w in want]


@pytest.mark.parametrize("causal", [True, False])
def test_each_layer_attends_with_its_own_encoding(causal):
    torch.manual_seed(0)
    model = Transformer(cfg(num_layers=3, layer_pe=["rope", "none"], causal=causal, pe_options={"base": 100.0}))
    x = torch.randn(2, T, D)
    outs = layer_outputs(model, x)
    # pe_options go to the model's pe (rope, base 100); layer 2 is rope again (the pattern repeats)
    for layer, rope in ((0, True), (1, False), (2, True)):
        ref = attention64(model.blocks[layer].attn, x, rope=rope, causal=causal, base=100.0)
        torch.testing.assert_close(outs[layer].double(), ref, atol=1e-5, rtol=1e-5)


def test_a_bias_encoding_in_a_pattern_equals_it_alone():
    """alibi on layer 1 of a rope/alibi pattern computes what a whole-alibi model's layer 1 does
    with the same weights (its per-layer index is the model's)."""
    torch.manual_seed(0)
    mixed = Transformer(cfg(layer_pe=["rope", "alibi"], causal=True))
    alone = Transformer(cfg(pe="alibi", causal=True))
    alone.load_state_dict(mixed.state_dict())
    x = torch.randn(2, T, D)
    torch.testing.assert_close(layer_outputs(mixed, x)[1], layer_outputs(alone, x)[1])


@pytest.mark.parametrize("kw,match", [
    (dict(layer_pe=["rope", "sincos"]), "absolute encoding"),
    (dict(pe="learned", layer_pe=["learned", "none"]), "absolute encoding"),
    (dict(layer_pe=["alibi", "none"]), "must include the model's pe 'rope'"),
    (dict(layer_pe=["rope", "none", "rope"]), "lists 3 layers but the model has 2"),
    (dict(layer_pe=["rope", "nope_typo"]), "unknown positional encoding 'nope_typo'"),
    (dict(logit_scale="llama4_temperature"), "NoPE layers only"),
    (dict(logit_scale="ssmax", logit_scale_options={"floor_scale": 2}), "takes s_init"),
    (dict(logit_scale="ssmax", logit_scale_options={"s_init": 0}), "must be > 0"),
    (dict(logit_scale="log_n", logit_scale_options={"s_init": 1}), "takes no options"),
    (dict(logit_scale="ssmax", train_tokens=None), "training length"),
])
def test_combinations_that_make_no_sense_are_refused(kw, match):
    with pytest.raises(LengenError, match=match):
        Transformer(cfg(**kw))


def test_float_positions_are_refused_for_any_layer_that_needs_integers():
    from lengen.positions import build_sampler
    model = Transformer(cfg(layer_pe=["rope", "t5"]))
    with pytest.raises(LengenError, match="'t5' needs integer positions"):
        model.pe.check_sampler(build_sampler("equal_mean", max_position=2048))


def test_a_patterns_parameter_bounds_name_its_parameters_and_are_projected():
    """ModelStack.project clamps `encoder.pe.<bound name>` on the stacked weights; a pattern's
    bounds must name its encodings' parameters by their paths."""
    model = CHEModel(cfg(pe="kerple_log", layer_pe=["kerple_log", "none"]), 4, 4)
    params = dict(model.named_parameters())
    bounds = model.encoder.pe.bounds
    assert bounds and all(f"encoder.pe.{n}" in params for n in bounds)
    with torch.no_grad():
        for n in bounds:
            params[f"encoder.pe.{n}"].fill_(-5.0)
    model.encoder.pe.project()
    for n, (lo, _) in bounds.items():
        assert params[f"encoder.pe.{n}"].min().item() == pytest.approx(lo)  # clamped up from -5


# -- decoder: KV cache and RoPE methods --------------------------------------------------------------

def decoder(**kw):
    torch.manual_seed(0)
    c = ModelConfig(num_layers=2, num_heads=4, d_model=32, d_ff=64, dropout=0.0, norm="pre", causal=True,
                    embed_scale=False, train_tokens=8, **kw)
    model = DecoderLM(c, 257).eval()
    with torch.no_grad():
        for block in model.decoder.blocks:
            block.attn.qkv.weight.mul_(8)
            if hasattr(block.attn, "ssmax_s"):
                block.attn.ssmax_s.copy_(torch.tensor([0.2, 0.5, 0.9, 1.4]))
    return model


@pytest.mark.parametrize("kw,spec", [
    (dict(layer_pe=["rope", "none"], logit_scale="llama4_temperature", logit_scale_options={"floor_scale": 3}), None),
    (dict(pe="alibi", layer_pe=["alibi", "none"], logit_scale="ssmax"), None),
    (dict(layer_pe=["rope", "none"], logit_scale="ssmax"), "yarn:factor=4"),
    (dict(layer_pe=["none", "rope"], logit_scale="llama4_temperature"), "rerope:window=6"),
])
@torch.no_grad()
def test_incremental_decoding_equals_the_full_forward(kw, spec):
    model = decoder(**kw)
    method = None if spec is None else resolve_methods([spec], model)[0].method
    x = torch.randint(0, 256, (2, 30), generator=torch.Generator().manual_seed(1))
    full = model(x, method=method)
    cache = model.new_cache()
    for a, b in [(0, 5), (5, 6), (6, 19), (19, 30)]:
        got = model(x[:, a:b], cache=cache, method=method)
        torch.testing.assert_close(got, full[:, a:b], atol=2e-5, rtol=1e-4)


@torch.no_grad()
def test_rope_methods_change_rope_layers_only():
    """A rope/none pattern: with a method the NoPE layer computes what it does without one."""
    model = decoder(layer_pe=["rope", "none"], logit_scale="llama4_temperature")
    method = resolve_methods(["pi:factor=4"], model)[0].method
    pos = torch.arange(20)[None]
    ctx_plain = AttentionContext(model.decoder.pe.prepare(pos, pos), pos, pos, True)
    y = torch.randn(1, 20, 32)
    ctx_method = AttentionContext(model.decoder.pe.prepare(pos, pos), pos, pos, True, method=method)
    torch.testing.assert_close(model.decoder.blocks[1].attn(y, ctx_method), model.decoder.blocks[1].attn(y, ctx_plain))
    assert not torch.allclose(model.decoder.blocks[0].attn(y, ctx_method), model.decoder.blocks[0].attn(y, ctx_plain))


def test_rope_methods_on_other_mixtures_are_refused():
    model = decoder(layer_pe=["rope", "alibi"])
    with pytest.raises(LengenError, match="layer-pe rope,alibi"):
        resolve_methods(["yarn:factor=2"], model)


# -- training many models at once ---------------------------------------------------------------------

@pytest.mark.parametrize("pe,layer_pe,scale,causal", [
    ("rope", ["rope", "none"], "ssmax", False),               # a padded member counts its real keys
    ("kerple_log", ["kerple_log", "none"], "llama4_temperature", True),  # bounds of a pattern's encoding
])
def test_group_training_equals_solo(tmp_path, pe, layer_pe, scale, causal):
    from lengen.io import load_torch
    from lengen.che.group import train_group
    from lengen.che.loop import train
    cfgs = [TrainConfig(task="reverse_string", steps=20, batch_size=8, train_length=5, max_length=7,
                        eval_samples=8, lr=lr, seed=seed, checkpoint_every=10, log_every=10, device="cpu",
                        model=ModelConfig(num_layers=2, num_heads=2, d_model=16, d_ff=32, dropout=0.0, pe=pe,
                                          layer_pe=layer_pe, logit_scale=scale, causal=causal, max_position=64))
            for seed, lr in [(0, 3e-3), (1, 1e-3)]]
    train_group(cfgs, [tmp_path / f"g{i}" for i in range(2)], progress=False)
    for i, c in enumerate(cfgs):
        train(TrainConfig.from_dict(c.to_dict()), tmp_path / f"s{i}", progress=False)
        a = load_torch(tmp_path / f"g{i}" / "checkpoint.pt")["model"]
        b = load_torch(tmp_path / f"s{i}" / "checkpoint.pt")["model"]
        assert a.keys() == b.keys()
        if scale == "ssmax":  # s moved away from its init 1 / log m (m = 10 tokens)
            assert (a["encoder.blocks.1.attn.ssmax_s"] - 1 / math.log(10)).abs().max() > 1e-4
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=1e-4, rtol=0)


# -- command line, sweeps, reports -----------------------------------------------------------------------

def test_cli_refuses_a_bad_combination_with_one_line_and_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "lengen", "train", "--layer-pe", "rope,sincos", "--steps", "1",
                        "--out", str(tmp_path / "x")], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "absolute encoding" in r.stderr
    assert not (tmp_path / "x").exists()


def test_new_fields_keep_old_sweep_run_ids():
    """The run ids of default configs as lengen computed them before these fields existed."""
    from lengen.lm.config import LMConfig
    from lengen.mlm.config import MLMConfig
    assert [run_id(c()) for c in (TrainConfig, LMConfig, MLMConfig)] == ["eec980ccb017", "2f5324ba91b1", "743551852c01"]
    assert run_id(TrainConfig(model=ModelConfig(layer_pe=["rope", "none"]))) != "eec980ccb017"
    assert run_id(TrainConfig(model=ModelConfig(logit_scale_options={"s_init": 1}))) != "eec980ccb017"


def test_sweep_file_takes_the_new_fields(tmp_path):
    from lengen.sweeps import expand, parse_spec
    spec = parse_spec({"name": "t", "command": "train",
                       "grid": {"layer_pe": [None, "rope,rope,rope,none"], "logit_scale": ["none", "ssmax"]},
                       "fixed": {"steps": 1, "logit_scale_options": {}}})
    runs = expand(spec)
    assert len(runs) == 4
    assert {tuple(r.config.model.layer_pe or ()) for r in runs} == {(), ("rope", "rope", "rope", "none")}


def test_report_labels():
    assert layer_pattern_label("rope,rope,rope,none") == "RoPE/NoPE 3:1"
    assert layer_pattern_label(["none", "rope"]) == "NoPE/RoPE 1:1"
    assert layer_pattern_label("['rope', 'alibi', 'none', 'none']") == "RoPE/ALiBi/NoPE 1:1:2"
    assert variant_label("rope", None, {"layer_pe": "rope,rope,rope,none", "logit_scale": "ssmax"}) == \
        "RoPE, RoPE/NoPE 3:1, SSMax"
    assert variant_label("rope", None, {"logit_scale": "log_n"}) == "RoPE, logit_scale=log_n"
    # the plain attention is not named, beside a scaled one: `RoPE`, not `RoPE, logit_scale=none`
    assert variant_label("rope", None, {"logit_scale": "none", "layer_pe": "rope,none"}) == "RoPE, RoPE/NoPE 1:1"
    assert aggregate.variant_label({"pe": "rope", "positions": "randomized", "logit_scale": "none"},
                                   ["pe", "positions", "logit_scale"]) == "r_rope"
    row = {"pe": "rope", "positions": "standard", "layer_pe": "rope,none", "logit_scale": "llama4_temperature"}
    assert aggregate.variant_label(row, ["pe", "positions", "layer_pe", "logit_scale"]) == \
        "rope, RoPE/NoPE 1:1, Llama 4 temperature"
