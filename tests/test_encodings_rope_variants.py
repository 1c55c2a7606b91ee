"""p-RoPE (rope option `fraction`, `p_rope`) and FoPE (`fope`) against independent float64
computations written here from the papers' formulas (reference note sections 1 and 2), the note's
hand-checked examples, their refusals, training-free methods on p-RoPE and checkpoints."""

import math

import pytest
import torch

from lengen.encodings import build_encoding
from lengen.errors import LengenError
from lengen.extrapolation import build_method
from lengen.lm.model import DecoderLM
from lengen.cli import main
from lengen.models import ModelConfig, Transformer


def cfg(**kw):
    base = dict(num_layers=2, num_heads=2, d_model=16, d_ff=32, dropout=0.0)  # head dim 8
    base.update(kw)
    return ModelConfig(**base)


def qk(B=2, H=2, T=5, d=8, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, d, generator=g, dtype=dtype), torch.randn(B, H, T, d, generator=g, dtype=dtype))


# -- p-RoPE: reference = a per-pair rotation loop in float64 -------------------------------------
def p_rope_reference(x, pos, p, base=10000.0):
    """x [B, H, T, d] float64; pair i = channels (i, i + d/2) rotated by pos * w_i, with
    w_i = base^(-2i/d) for i < int(p d // 2) and 0 otherwise (note section 1)."""
    B, H, T, d = x.shape
    R = int(p * d // 2)
    out = x.clone()
    for b in range(B):
        for h in range(H):
            for t in range(T):
                n = float(pos[min(b, pos.shape[0] - 1), t])
                for i in range(d // 2):
                    w = base ** (-2.0 * i / d) if i < R else 0.0
                    c, s = math.cos(n * w), math.sin(n * w)
                    x1, x2 = x[b, h, t, i], x[b, h, t, i + d // 2]
                    out[b, h, t, i] = x1 * c - x2 * s
                    out[b, h, t, i + d // 2] = x2 * c + x1 * s
    return out


def test_p_rope_frequencies_hand_example():
    # note section 1: d = 8, b = 1e4, p = 0.5 -> R = 2, w = [1, 0.1, 0, 0] (not HF partial rotary's [1, 0.01])
    enc = build_encoding(cfg(pe="rope", pe_options={"fraction": 0.5}))
    assert torch.allclose(enc.inv_freq, torch.tensor([1.0, 0.1, 0.0, 0.0]))
    assert torch.allclose(build_encoding(cfg(pe="p_rope", pe_options={"fraction": 0.5})).inv_freq, enc.inv_freq)
    # p_rope's default is 0.25: one of the 4 pairs
    assert torch.allclose(build_encoding(cfg(pe="p_rope")).inv_freq, torch.tensor([1.0, 0.0, 0.0, 0.0]))


@pytest.mark.parametrize("pe,options,p", [("rope", {"fraction": 0.5}, 0.5), ("p_rope", {}, 0.25),
                                          ("p_rope", {"fraction": 0.75}, 0.75), ("rope", {}, 1.0)])
def test_p_rope_forward_and_gradient_match_per_pair_loop(pe, options, p):
    enc = build_encoding(cfg(pe=pe, pe_options=options))
    pos = torch.tensor([[0, 1, 2, 3, 4], [3, 7, 8, 20, 21]])
    q, k = qk()
    q.requires_grad_(True)
    k.requires_grad_(True)
    q2, k2 = enc.transform_qk(0, enc.prepare(pos, pos), q, k)
    q64, k64 = q.detach().double().requires_grad_(True), k.detach().double().requires_grad_(True)
    rq, rk = p_rope_reference(q64, pos, p), p_rope_reference(k64, pos, p)
    assert torch.allclose(q2.double(), rq, atol=1e-5) and torch.allclose(k2.double(), rk, atol=1e-5)
    # gradient of a generic scalar through the (hand-written) backward
    wq, wk = qk(seed=5)
    ((q2 * wq).sum() + (k2 * wk).sum() + (q2 * k2).sum()).backward()
    ((rq * wq.double()).sum() + (rk * wk.double()).sum() + (rq * rk).sum()).backward()
    assert torch.allclose(q.grad.double(), q64.grad, atol=1e-4) and torch.allclose(k.grad.double(), k64.grad, atol=1e-4)


def test_p_rope_nope_channels_are_not_a_contiguous_tail():
    # note section 1 pitfall: with d = 8, p = 0.5 the position-free channels are 2, 3, 6, 7
    enc = build_encoding(cfg(pe="rope", pe_options={"fraction": 0.5}))
    q, k = qk(T=4)
    pos = torch.tensor([[5, 9, 13, 100]])
    q2, _ = enc.transform_qk(0, enc.prepare(pos, pos), q, k)
    for c in range(8):
        same = torch.allclose(q2[..., c], q[..., c])
        assert same == (c in (2, 3, 6, 7)), c


def test_rope_fraction_one_is_plain_rope():
    torch.manual_seed(0)
    a = Transformer(cfg(pe="rope"))
    torch.manual_seed(0)
    b = Transformer(cfg(pe="rope", pe_options={"fraction": 1}))
    x, pos = torch.randn(2, 6, 16), torch.arange(6)[None]
    assert torch.equal(a(x, pos), b(x, pos))


@pytest.mark.parametrize("pe,options,match", [
    ("rope", {"fraction": 0}, r"\(0, 1\]"),
    ("rope", {"fraction": 1.5}, r"\(0, 1\]"),
    ("rope", {"fraction": -0.25}, r"\(0, 1\]"),
    ("rope", {"fraction": "half"}, "number"),
    ("rope", {"fraction": True}, "number"),
    ("p_rope", {"fraction": 0.2}, "0 of the 4"),  # int(0.2 * 8 // 2) = 0 pairs: NoPE
    ("rope", {"fraction": 0.5, "rotary_dim": 4}, "do not combine"),
    ("p_rope", {"rotary_dim": 4}, "rotary_dim"),
    ("alibi", {"fraction": 0.5}, "fraction"),
    ("fire", {"fraction": 0.5}, "fraction"),
    ("fope", {"fraction": 0.5}, "fraction"),
    ("fope", {"rotary_dim": 4}, "rotary_dim"),
    ("fope", {"gain": -0.1}, "gain"),
    ("fope", {"gain": "big"}, "gain"),
    ("fope", {"learnable": "yes"}, "learnable"),
    ("fope", {"length": 3}, "none"),           # 2 pi / 3 > 1 = the highest frequency
    ("fope", {"length": 0}, "length"),
    ("fope", {"length": 2.5}, "integer"),
    ("fope", {"base": 1}, "base"),
])
def test_bad_options_are_refused(pe, options, match):
    with pytest.raises(LengenError, match=match):
        build_encoding(cfg(pe=pe, pe_options=options))


def test_fope_needs_a_head_dim_of_four():
    with pytest.raises(LengenError, match="head dim"):
        build_encoding(cfg(pe="fope", d_model=4, num_heads=2))


# -- training-free methods on p-RoPE and the KV cache -----------------------------------------
def tiny_lm(pe, **options):
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(num_layers=2, num_heads=2, d_model=32, d_ff=64, dropout=0.0, norm="pre",
                                  causal=True, pe=pe, pe_options=options, train_tokens=8), 257).eval()
    with torch.no_grad():
        for block in model.decoder.blocks:
            block.attn.qkv.weight.mul_(8)  # positions matter in the logits
    return model


@torch.no_grad()
def test_methods_keep_p_rope_nope_channels():
    model = tiny_lm("p_rope", fraction=0.5)  # head dim 16: pairs 4..7 unrotated
    spec = model.rope_spec()
    assert spec.fraction == 0.5
    inv_freq, _ = build_method("pi:factor=2", spec).params(32)
    want = torch.tensor([10000.0 ** (-2 * i / 16) / 2 if i < 4 else 0.0 for i in range(8)])
    assert torch.allclose(inv_freq, want)
    x = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(1))
    # an identity method equals the encoding's own hooks (it would not if it rotated the NoPE pairs)
    assert torch.allclose(model(x, method=build_method("pi:factor=1", spec)), model(x), atol=1e-5)
    plain_rope = tiny_lm("rope")
    assert not torch.allclose(plain_rope(x), model(x), atol=1e-3)


@pytest.mark.parametrize("spec", [None, "yarn:factor=4", "rerope:window=6", "dynamic:factor=2",
                                  "self_extend:group=3,window=6"])
@torch.no_grad()
def test_p_rope_incremental_decoding_equals_full_forward(spec):
    model = tiny_lm("p_rope", fraction=0.5)
    method = None if spec is None else build_method(spec, model.rope_spec())
    x = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(1))
    per_prefix = getattr(method, "length_dependent", False)
    full = model(x, method=method)
    cache = model.new_cache()
    for a, b in [(0, 5), (5, 6), (6, 15), (15, 24)]:
        got = model(x[:, a:b], cache=cache, method=method)
        want = model(x[:, :b], method=method)[:, a:b] if per_prefix else full[:, a:b]
        assert torch.allclose(got, want, atol=2e-5, rtol=1e-4), (spec, a, b)


def test_methods_are_refused_on_fope():
    from lengen.lm.methods import resolve_methods
    model = tiny_lm("fope")
    assert not model.is_rope
    with pytest.raises(LengenError, match="needs a RoPE model"):
        resolve_methods(["yarn:factor=2"], model)


# -- FoPE: reference = explicit sums over frequencies in float64 ---------------------------------
def fope_frequencies_reference(d, L, base=10000.0):
    return [base ** (-2.0 * k / d) for k in range(d // 2) if base ** (-2.0 * k / d) >= 2 * math.pi / L]


def test_fope_kept_frequencies_hand_examples():
    # note section 2: d = 64, L = 512 -> K = M = 16 (w_15 = 0.013335 kept, w_16 = 0.01 zeroed)
    enc = build_encoding(ModelConfig(num_layers=1, num_heads=8, d_model=512, pe="fope", train_tokens=512))
    assert (enc.kept, enc.slots) == (16, 16)
    assert enc.freqs[-1].item() == pytest.approx(0.013335, abs=1e-6)
    assert enc.cos_coef.shape == enc.sin_coef.shape == (1, 8, 16, 16)
    # d = 8, L = 16: floor 0.3927, only w = 1 survives
    enc = build_encoding(cfg(pe="fope", train_tokens=16))
    assert (enc.kept, enc.slots) == (1, 1) and enc.freqs.tolist() == [1.0]
    # L is the model's training length, or the `length` option
    assert build_encoding(cfg(pe="fope", train_tokens=80)).length == 80
    assert build_encoding(cfg(pe="fope", train_tokens=80, pe_options={"length": 1000})).length == 1000


def test_fope_init_step_eye_and_xavier_std():
    # gain 0 leaves the step eye. d = 16 (M = d/4 = 4), w_k = 10^(-k/2): L = 20000 keeps K = 8
    # (stride 2: rows 0, 2, 4, 6); L = 4096 keeps K = 6 (stride 2: rows 0, 2, 4, and slot 3 gets no 1)
    for length, kept, rows in ((20000, 8, [0, 2, 4, 6]), (4096, 6, [0, 2, 4])):
        enc = build_encoding(cfg(pe="fope", d_model=32, pe_options={"gain": 0, "length": length}))
        assert (enc.kept, enc.slots) == (len(fope_frequencies_reference(16, length)), 4) == (kept, 4)
        eye = torch.zeros(kept, 4)
        for i, row in enumerate(rows):
            eye[row, i] = 1.0
        for a in (enc.cos_coef, enc.sin_coef):
            assert torch.equal(a, eye.expand(2, 2, kept, 4))
    # note: H = 8, K = M = 16, gain 0.3 -> std 0.3 sqrt(2 / (16*16 + 8*16)) = 0.0217 around the identity
    torch.manual_seed(0)
    enc = build_encoding(ModelConfig(num_layers=4, num_heads=8, d_model=512, pe="fope", train_tokens=512))
    noise = enc.cos_coef - torch.eye(16)
    assert noise.std().item() == pytest.approx(0.0217, rel=0.05)
    assert abs(noise.mean().item()) < 0.003
    assert not torch.equal(enc.cos_coef, enc.sin_coef) and not torch.equal(enc.cos_coef[0], enc.cos_coef[1])
    assert not enc.cos_coef.requires_grad  # fixed at init unless learnable


def fope_reference(x, pos, freqs, a_cos, a_sin):
    """x [B, H, T, d] float64, a_cos/a_sin [H, K, M] float64 of one layer: slot m < M gets
    C = sum_k cos(w_k n) A^cos[h, k, m], S likewise with sin; slots m >= M get C = S = 1; pair m
    = channels (m, m + d/2) maps to (x1 C - x2 S, x2 C + x1 S) (note section 2)."""
    B, H, T, d = x.shape
    K, M = a_cos.shape[1:]
    out = torch.zeros_like(x)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                n = float(pos[min(b, pos.shape[0] - 1), t])
                for m in range(d // 2):
                    if m < M:
                        c = sum(math.cos(freqs[kk] * n) * a_cos[h, kk, m] for kk in range(K))
                        s = sum(math.sin(freqs[kk] * n) * a_sin[h, kk, m] for kk in range(K))
                    else:
                        c = s = 1.0
                    x1, x2 = x[b, h, t, m], x[b, h, t, m + d // 2]
                    out[b, h, t, m] = x1 * c - x2 * s
                    out[b, h, t, m + d // 2] = x2 * c + x1 * s
    return out


@pytest.mark.parametrize("learnable", [False, True])
@pytest.mark.parametrize("layer", [0, 1])
def test_fope_forward_and_gradient_match_fourier_sums(learnable, layer):
    # d = 8, L = 80: w = 1, 0.1 kept (floor 0.0785), K = M = 2: two Fourier slots, two constant ones
    enc = build_encoding(cfg(pe="fope", train_tokens=80, pe_options={"learnable": learnable, "gain": 0.5}))
    freqs = fope_frequencies_reference(8, 80)
    assert len(freqs) == 2
    pos = torch.tensor([[0.0, 1.0, 2.5, 7.0, 30.0], [3.0, 4.0, 11.0, 12.0, 50.0]])
    q, k = qk()
    q.requires_grad_(True)
    k.requires_grad_(True)
    q2, k2 = enc.transform_qk(layer, enc.prepare(pos, pos), q, k)
    a_cos = enc.cos_coef[layer].detach().double().requires_grad_(True)
    a_sin = enc.sin_coef[layer].detach().double().requires_grad_(True)
    q64, k64 = q.detach().double().requires_grad_(True), k.detach().double().requires_grad_(True)
    rq, rk = fope_reference(q64, pos, freqs, a_cos, a_sin), fope_reference(k64, pos, freqs, a_cos, a_sin)
    assert torch.allclose(q2.double(), rq, atol=1e-5) and torch.allclose(k2.double(), rk, atol=1e-5)
    wq, wk = qk(seed=3)
    ((q2 * wq).sum() + (q2 * k2).sum() + (k2 * wk).sum()).backward()
    ((rq * wq.double()).sum() + (rq * rk).sum() + (rk * wk.double()).sum()).backward()
    assert torch.allclose(q.grad.double(), q64.grad, atol=1e-4) and torch.allclose(k.grad.double(), k64.grad, atol=1e-4)
    if learnable:
        assert torch.allclose(enc.cos_coef.grad[layer].double(), a_cos.grad, atol=1e-4)
        assert torch.allclose(enc.sin_coef.grad[layer].double(), a_sin.grad, atol=1e-4)
        assert torch.count_nonzero(enc.cos_coef.grad[1 - layer]) == 0
    else:
        assert enc.cos_coef.grad is None


def test_fope_separate_keys_positions_and_not_shift_invariant():
    # queries and keys at different positions (the KV cache's case) and a shift of all positions
    enc = build_encoding(cfg(pe="fope", train_tokens=80))
    freqs = fope_frequencies_reference(8, 80)
    q, k = qk(B=1, T=3)
    pos_q, pos_k = torch.tensor([[5.0, 6.0, 7.0]]), torch.tensor([[0.0, 3.0, 6.0]])
    q2, k2 = enc.transform_qk(0, enc.prepare(pos_q, pos_k), q, k)
    a_cos, a_sin = enc.cos_coef[0].double(), enc.sin_coef[0].double()
    assert torch.allclose(q2.double(), fope_reference(q.double(), pos_q, freqs, a_cos, a_sin), atol=1e-5)
    assert torch.allclose(k2.double(), fope_reference(k.double(), pos_k, freqs, a_cos, a_sin), atol=1e-5)
    q3, k3 = enc.transform_qk(0, enc.prepare(pos_q + 10, pos_k + 10), q, k)
    assert not torch.allclose(q2 @ k2.transpose(-1, -2), q3 @ k3.transpose(-1, -2), atol=1e-3)
    assert not enc.relative


def test_fope_coefficients_travel_with_the_checkpoint():
    torch.manual_seed(0)
    a = Transformer(cfg(pe="fope"))
    torch.manual_seed(1)
    b = Transformer(cfg(pe="fope"))
    x, pos = torch.randn(1, 6, 16), torch.arange(6)[None]
    assert not torch.allclose(a(x, pos), b(x, pos))
    assert "pe.cos_coef" in a.state_dict() and "pe.sin_coef" in a.state_dict()
    b.load_state_dict(a.state_dict())
    assert torch.equal(a(x, pos), b(x, pos))


@pytest.mark.parametrize("argv", [
    ["train", "--pe", "alibi", "--pe-option", "fraction=0.5"],
    ["train", "--pe", "rope", "--pe-option", "fraction=0"],
    ["train", "--pe", "fope", "--pe-option", "gain=-1"],
    ["lm", "train", "--pe", "fope", "--pe-option", "fraction=0.25"],
    ["mlm", "train", "--pe", "kerple_log", "--pe-option", "fraction=0.25"],
])
def test_cli_refuses_with_one_line_and_exit_2(argv, tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*argv, "--steps", "2", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lengen: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists()
