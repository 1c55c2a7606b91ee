"""DPE (lengen.extrapolation.dpe): a naive per-pair reference, identity inside the window, equality
with Self-Extend, decoding with the KV cache (lengen.hf, lengen.lm), refusals, calibration."""

import json
import math

import pytest
import torch

from lengen.errors import LengenError
from lengen.extrapolation import RopeSpec, build_method
from lengen.extrapolation.dpe import Dpe, PairScores, top_pairs
from lengen.cli import main

from guards import refused

ROPE = RopeSpec(rotary_dim=16, base=10000.0, train_length=64)   # 8 frequency pairs
# pair -> its own mask per head (2 query heads), neither all nor none
MASK = torch.tensor([[1, 0, 1, 1, 0, 1, 0, 1],
                     [0, 1, 1, 0, 1, 1, 1, 0]], dtype=torch.bool)


def naive_dpe(q, k, v, pos_q, pos_k, W, pair_scale, mask, scale):
    """Attention written pair by pair in float64: for every (query i, key j) and every frequency pair
    p, the positions the pair is rotated by, chosen by hand; then a full softmax. q [H, Tq, d], k, v
    [H, Tk, d] (k, v already per query head), pair_scale[p] the group size of pair p."""
    H, Tq, d = q.shape
    n = d // 2
    theta = [10000.0 ** (-2 * p / d) for p in range(n)]
    out = torch.zeros(H, Tq, v.shape[-1], dtype=torch.float64)
    for h in range(H):
        for i in range(Tq):
            pi = float(pos_q[i])
            logits = []
            for j in range(k.shape[1]):
                pj = float(pos_k[j])
                if pj > pi:
                    logits.append(-math.inf)
                    continue
                total = 0.0
                for p in range(n):
                    if pi - pj < W:                      # near: true positions
                        a, b = pi, pj
                    elif mask is None or mask[h, p]:     # far, a key pair: grouped by its group's size
                        s = pair_scale[p]
                        a, b = math.floor(pi / s) + W - W / s, math.floor(pj / s)
                    else:                                # far, any other pair: true positions
                        a, b = pi, pj
                    q1, q2 = float(q[h, i, p]), float(q[h, i, p + n])
                    k1, k2 = float(k[h, j, p]), float(k[h, j, p + n])
                    ca, sa, cb, sb = math.cos(a * theta[p]), math.sin(a * theta[p]), math.cos(b * theta[p]), math.sin(b * theta[p])
                    total += (q1 * ca - q2 * sa) * (k1 * cb - k2 * sb) + (q2 * ca + q1 * sa) * (k2 * cb + k1 * sb)
                logits.append(total * scale)
            out[h, i] = torch.tensor(logits, dtype=torch.float64).softmax(-1) @ v[h]
    return out


def qkv(T, Tq=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, Tq or T, 16, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, T, 16, generator=g, dtype=torch.float64)   # grouped-query: 1 key head
    v = torch.randn(1, 1, T, 16, generator=g, dtype=torch.float64)
    return q, k, v


def dpe(spec, mask=MASK):
    m = build_method(spec, ROPE)
    if mask is not None:
        m.set_key_pairs({0: mask})
    return m.for_layer(0)


# W = 6 and group sizes 4, 5 (not dividing W: the float shift W - W/s matters), one per 2 pairs
SPEC = "dpe:scales=2-3-4-5,window=6,block=8"
PAIR_SCALE = [2, 2, 3, 3, 4, 4, 5, 5]


@pytest.mark.parametrize("positions", ["contiguous", "gaps", "decode"])
def test_matches_a_naive_per_pair_reference(positions):
    T = 40
    pos = torch.arange(T)[None]
    if positions == "gaps":   # the general blockwise path: sorted distinct positions up to 120
        pos = torch.randperm(120, generator=torch.Generator().manual_seed(3))[:T].sort().values[None]
    q, k, v = qkv(T, 1 if positions == "decode" else None)
    pos_q = pos[:, -1:] if positions == "decode" else pos
    out = dpe(SPEC).attend(q, k, v, pos_q, pos, 0.25)
    K, V = k.repeat_interleave(2, 1)[0], v.repeat_interleave(2, 1)[0]
    expected = naive_dpe(q[0], K, V, pos_q[0], pos[0], 6, PAIR_SCALE, MASK, 0.25)
    torch.testing.assert_close(out[0], expected, atol=1e-5, rtol=0)
    plain = naive_dpe(q[0], K, V, pos_q[0], pos[0], 10 ** 9, PAIR_SCALE, MASK, 0.25)
    assert (expected - plain).abs().max() > 1e-2                          # the grouping matters
    unmasked = naive_dpe(q[0], K, V, pos_q[0], pos[0], 6, PAIR_SCALE, None, 0.25)
    assert (expected - unmasked).abs().max() > 1e-2                       # and so does the mask


def test_inside_the_window_it_is_plain_rope():
    T = 40   # largest distance 39 = window - 1
    q, k, v = qkv(T)
    pos = torch.arange(T)[None]
    plain = build_method("rope", ROPE).attend(q, k, v, pos, pos, 0.25)
    torch.testing.assert_close(dpe("dpe:scales=2-3-4-5,window=40,block=8").attend(q, k, v, pos, pos, 0.25),
                               plain, atol=1e-10, rtol=0)
    # one step past it (distance 40 = the window; 3 does not divide 40) the far pairs differ
    q, k, v = qkv(T + 1)
    pos = torch.arange(T + 1)[None]
    plain = build_method("rope", ROPE).attend(q, k, v, pos, pos, 0.25)
    assert (dpe("dpe:scales=3-3-3-3,window=40").attend(q, k, v, pos, pos, 0.25) - plain).abs().max() > 1e-6


@pytest.mark.parametrize("mask", [None, torch.ones(2, 8, dtype=torch.bool)])
def test_one_scale_for_every_pair_is_self_extend(mask):
    q, k, v = qkv(50)
    pos = torch.arange(50)[None]
    se = build_method("self_extend:group=3,window=7,block=8", ROPE).attend(q, k, v, pos, pos, 0.25)
    torch.testing.assert_close(dpe("dpe:scales=3-3-3-3,window=7,topk=8,block=8", mask).attend(q, k, v, pos, pos, 0.25),
                               se, atol=1e-12, rtol=0)
    torch.testing.assert_close(dpe("dpe:scales=3,window=7,block=8", mask).attend(q, k, v, pos, pos, 0.25),
                               se, atol=1e-12, rtol=0)


def test_spec_and_defaults():
    m = build_method("dpe:scales=4-4-2-16-32-32-16-128,window=1024,topk=48+logn",
                     RopeSpec(rotary_dim=128, base=5e5, train_length=8192))
    assert str(m) == "rope+dpe:scales=4-4-2-16-32-32-16-128,window=1024,topk=48+logn" and m.remaps
    part = m.remap
    assert part.scales == [4, 4, 2, 16, 32, 32, 16, 128] and part.n_pairs == 64
    assert part.pair_scales()[[0, 7, 8, 16, 63]].tolist() == [4, 4, 4, 2, 128]
    d = build_method("dpe:scales=8-8", RopeSpec(rotary_dim=128, train_length=8192))
    assert (d.window, d.topk, d.needs_calibration) == (1024, 48, True)      # L0 / 8, 3/4 of the pairs
    assert not build_method("dpe:scales=8,topk=64", RopeSpec(rotary_dim=128)).needs_calibration
    listed = Dpe.from_options(ROPE, {"scales": [2, 2.5, 4.0, 8], "window": 6})
    assert str(listed) == "dpe:scales=2-2.5-4-8,window=6" and str(build_method(str(listed), ROPE)) == str(listed)


@pytest.mark.parametrize("spec,message", [
    ("dpe", "scales is required"),
    ("dpe:scales=2-3-4,window=8", "the 8 frequency pairs of rotary_dim 16 do not split into 3 equal groups"),
    ("dpe:scales=2-0-4-8,window=8", "scales must be >= 1"),
    ("dpe:scales=2--4-8,window=8", "scales must be numbers joined by '-'"),
    ("dpe:scales=2-4,topk=9", "topk must be in 1..8"),
    ("dpe:scales=2-4,topk=0", "topk must be in 1..8"),
    ("dpe:scales=2-4,window=64", "the window (64) must be <= 63"),
])
def test_bad_specs_are_refused_in_one_line(spec, message, tmp_path, capsys, monkeypatch):
    pytest.importorskip("transformers")
    import lengen.hf.evaluate as evaluate
    from guards import no_model
    from tiny_llama import save_tiny_llama

    monkeypatch.setenv("LENGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(evaluate, "model_fingerprint", no_model)   # refused before the weights are read
    model = save_tiny_llama(tmp_path) / "model"                       # head_dim 16, 64 positions
    capsys.readouterr()
    err = refused(["hf", "eval", str(model), "--lengths", "128", "--methods", spec, "--out", str(tmp_path / "o"),
                   "--no-progress"], capsys)
    assert message in err, err
    assert not (tmp_path / "o").exists()


def test_dpe_window_63_is_accepted_at_64_positions(tmp_path, capsys, monkeypatch):
    pytest.importorskip("transformers")
    import lengen.hf.evaluate as evaluate
    from guards import ModelLoaded, no_model
    from tiny_llama import save_tiny_llama

    monkeypatch.setattr(evaluate, "model_fingerprint", no_model)
    model = save_tiny_llama(tmp_path) / "model"
    with pytest.raises(ModelLoaded):
        main(["hf", "eval", str(model), "--lengths", "128", "--methods", "dpe:scales=2-4,window=63,topk=8",
              "--out", str(tmp_path / "o"), "--no-progress"])


# ---- calibration ----------------------------------------------------------------------------------

def test_pair_scores_find_the_planted_pairs():
    g = torch.Generator().manual_seed(0)
    q = 0.01 * torch.randn(2, 2, 10, 16, generator=g)
    k = 0.01 * torch.randn(2, 1, 10, 16, generator=g)
    for pair in (1, 5, 6):                    # key pairs of the one key head: large on both channels
        k[..., pair], k[..., pair + 8] = 3.0, 4.0
    for h, pairs in ((0, (1, 5)), (1, (5, 6))):
        for pair in pairs:
            q[:, h, :, pair] = 1.0
    q[:, 0, :, 6] = 0.1                         # head 0, pair 6: |q| 0.1, |k| 5: below pairs 1, 5
    scores = PairScores(16)
    scores(3, q, k)
    c = scores.scores()[3]
    assert c.shape == (2, 8) and abs(float(c[0, 1]) - 5.0) < 0.05      # |q| 1 x |k| 5, every token
    masks = top_pairs(scores.scores(), 2)[3]
    assert [torch.nonzero(row).flatten().tolist() for row in masks] == [[1, 5], [5, 6]]
    assert [torch.nonzero(row).flatten().tolist() for row in top_pairs(scores.scores(), 3)[3]] == [[1, 5, 6], [1, 5, 6]]


transformers_only = pytest.mark.skipif(not __import__("importlib").util.find_spec("transformers"),
                                       reason="needs transformers")


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from test_hf_extend import tiny as tiny_model

    monkeypatch.setenv("LENGEN_CACHE", str(tmp_path / "cache"))
    return tiny_model("sdpa")


def ids(batch=2, length=32, seed=3):
    return torch.randint(0, 100, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_capture_hands_over_pre_rope_q_and_k(tiny):
    from lengen.hf.patch import capture_qk

    seen = {}
    capture_qk(tiny, ids(1, 20), lambda layer, q, k: seen.setdefault(layer, (q, k)))
    assert sorted(seen) == [0, 1]
    layer = tiny.model.layers[0]
    with torch.no_grad():
        h = layer.input_layernorm(tiny.model.embed_tokens(ids(1, 20)))
        q = layer.self_attn.q_proj(h).view(1, 20, 4, 16).transpose(1, 2)
        k = layer.self_attn.k_proj(h).view(1, 20, 2, 16).transpose(1, 2)
    torch.testing.assert_close(seen[0][0], q) and torch.testing.assert_close(seen[0][1], k)
    from lengen.hf.extensions import EXTENDED
    assert tiny not in EXTENDED                                   # left as it was


def test_calibration_cache_reuse_and_a_damaged_file_rebuilt(tiny, capsys):
    import lengen.hf.calibration as cal
    from lengen.hf.patch import capture_qk

    method = build_method("dpe:scales=2-4-8-16,window=8,topk=3", RopeSpec(rotary_dim=16, train_length=32))
    first = cal.dpe_key_pairs(tiny, method, capture_qk, ids())
    assert sorted(first) == [0, 1] and all(m.shape == (4, 8) and (m.sum(-1) == 3).all() for m in first.values())
    files = list((cal.io.cache_root() / "dpe").glob("*.json"))
    assert len(files) == 1
    again = cal.dpe_key_pairs(tiny, method, lambda *a: pytest.fail("calibrated again"), ids())
    assert all(torch.equal(again[l], first[l]) for l in first)
    assert capsys.readouterr().err == ""
    for damage, said in [(lambda t: t[: len(t) // 2], "is damaged (not JSON"),
                         (lambda t: t.replace('"topk": 3', '"topk": 4'), "holds the key pairs of other settings"),
                         (lambda t: json.dumps({**json.loads(t), "layers": {"0": [[9, 1, 2]]}}), "is damaged (layer '0'")]:
        files[0].write_text(damage(files[0].read_text()))
        rebuilt = cal.dpe_key_pairs(tiny, method, capture_qk, ids())
        err = capsys.readouterr().err
        assert str(files[0]) in err and said in err, err
        assert all(torch.equal(rebuilt[l], first[l]) for l in first)
        assert json.loads(files[0].read_text())["settings"]["topk"] == 3        # written again, whole
    other = cal.dpe_key_pairs(tiny, method, capture_qk, ids(seed=4))                        # other text: another file
    assert len(list((cal.io.cache_root() / "dpe").glob("*.json"))) == 2 and other.keys() == first.keys()


def test_extend_without_text_or_folder_is_refused(tiny):
    from lengen.hf import extend

    with pytest.raises(LengenError, match="calibrating the key pairs needs text"):
        extend(tiny, "dpe:scales=2-4,window=8")
    extend(tiny, "dpe:scales=2-4,window=8,topk=8")     # every pair: no calibration


def test_calibration_text_of_one_long_document_is_its_consecutive_pieces(tmp_path, monkeypatch):
    """One book as the text (hf tune --text book.txt): the calibration sequences are its first
    pieces in order, [BOS] + tokens [0, n), [n, 2n), ..., where n = length - 1; a text too short
    for count pieces is one line naming it."""
    transformers = pytest.importorskip("transformers")
    from tiny_llama import save_tiny_llama

    from lengen.errors import LengenError
    from lengen.hf.calibration import CalibrationText, _token_ids

    monkeypatch.setenv("LENGEN_CACHE", str(tmp_path / "cache"))
    root = save_tiny_llama(tmp_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(root / "model").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(root / "model")
    book = tmp_path / "book.txt"
    book.write_text("".join(f"chapter {i}: the {i % 9} lamps were lit at {i * 7} past\n" for i in range(60)))
    tokens = tokenizer(book.read_text(), add_special_tokens=False)["input_ids"]
    bos = [tokenizer.bos_token_id] if tokenizer("a")["input_ids"][0] == tokenizer.bos_token_id else []
    n = 24 - len(bos)
    assert len(tokens) >= 4 * n
    got = _token_ids(model, CalibrationText(tokenizer, str(book)), 24, 4, "dpe")
    assert got.tolist() == [bos + tokens[i * n:(i + 1) * n] for i in range(4)]
    exact = len(tokens) // n   # pieces that fit: equal to the count asked for, then one more
    assert _token_ids(model, CalibrationText(tokenizer, str(book)), 24, exact, "dpe").shape == (exact, 24)
    with pytest.raises(LengenError, match=f"book.txt gives {exact} sequences of 24 tokens, {exact + 1} needed"):
        _token_ids(model, CalibrationText(tokenizer, str(book)), 24, exact + 1, "dpe")


# ---- lengen.hf: decoding with the cache, families ----------------------------------------------

def test_tiny_llama_decode_after_prefill_equals_full_forwards(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    from test_hf_extend import check_generate_equals_full_forwards
    from tiny_llama import save_tiny_llama

    from lengen.hf import extend
    from lengen.hf.calibration import calibration_ids
    from lengen.hf.extensions import EXTENDED

    monkeypatch.setenv("LENGEN_CACHE", str(tmp_path / "cache"))
    root = save_tiny_llama(tmp_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(root / "model").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(root / "model")
    text = calibration_ids(model, tokenizer, source=str(root / "corpus"), length=48, count=3)
    assert text.shape == (3, 48)
    extend(model, "dpe:scales=2-3-4-8,window=8,topk=5", calibration=text)
    masks = [plan.method.mask for plan in EXTENDED[model].plans.values()]
    assert all(m.shape == (2, 8) and (m.sum(-1) == 5).all() for m in masks) and not torch.equal(*masks)
    check_generate_equals_full_forwards(model, ids(1, 40), new_tokens=8)


@pytest.mark.parametrize("name", ["gemma3", "smollm3", "llama4", "olmo2", "olmo3", "granite", "qwen3_moe"])
def test_families_decode_equals_full_forwards_and_identity_within_the_window(name, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from hf_families import TRAIN, tiny_family
    from test_hf_extend import check_generate_equals_full_forwards, logits

    from lengen.hf import extend, restore

    monkeypatch.setenv("LENGEN_CACHE", str(tmp_path / "cache"))
    model = tiny_family(name, "sdpa")
    short = ids(2, 12)
    base = logits(model, short)
    extend(model, "dpe:scales=2-3-4-8,window=12,topk=5", calibration=ids(2, 24))
    torch.testing.assert_close(logits(model, short), base, atol=1e-5, rtol=0)   # every distance < 12
    check_generate_equals_full_forwards(model, ids(1, TRAIN - 4), new_tokens=8)
    restore(model)
    assert torch.equal(logits(model, short), base)


def test_hf_every_pair_one_scale_is_self_extend(tiny):
    from test_hf_extend import logits, tokens

    from lengen.hf import extend, restore

    x = tokens()
    extend(tiny, "self_extend:group=4,window=8")
    se = logits(tiny, x)
    restore(tiny)
    extend(tiny, "dpe", scales=[4, 4], window=8, topk=8)
    torch.testing.assert_close(logits(tiny, x), se, atol=1e-5, rtol=0)


def test_methods_lists_dpe_and_export_refuses_it(capsys):
    pytest.importorskip("transformers")
    from lengen.hf.exporting import check_exportable

    assert main(["hf", "methods", "--list"]) == 0
    assert "dpe" in capsys.readouterr().out
    with pytest.raises(LengenError, match="no engine implements dpe natively"):
        check_exportable("dpe:scales=2-4,window=8")


# ---- lengen.lm ----------------------------------------------------------------------------------

def test_lm_eval_calibrates_on_validation_windows_and_decodes_like_full_forwards(tmp_path, monkeypatch):
    from tiny_lm import TINY

    from lengen.lm.evaluate import load_run
    from lengen.lm.methods import ResolvedMethod, calibrate_methods

    monkeypatch.setenv("LENGEN_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    assert main(["lm", "train", *TINY, "--steps", "6", "--out", str(out)]) == 0
    assert main(["lm", "eval", str(out), "--methods", "rope,dpe:scales=2-4,window=4", "--lengths", "16,48",
                 "--docs", "2", "--no-progress"]) == 0
    rows = json.loads((out / "eval-ppl" / "results.json").read_text())["rows"]
    assert {r["method"] for r in rows} == {"rope", "dpe:scales=2-4,window=4"}
    assert all(math.isfinite(r["ppl"]) for r in rows)
    cfg, model = load_run(out)
    method = build_method("dpe:scales=2-4,window=4", model.rope_spec())   # head_dim 8: 4 pairs, topk 3
    calibrate_methods([ResolvedMethod("dpe", method)], model, cfg.corpus, cfg.val_fraction)
    assert sorted(method.key_pairs) == [0] and (method.key_pairs[0].sum(-1) == 3).all()
    x = torch.randint(0, 256, (1, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(x, method=method)
        cache = model.new_cache()
        steps = [model(x[:, :20], cache=cache, method=method)] + [
            model(x[:, t:t + 1], cache=cache, method=method) for t in range(20, 30)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)
    other = Dpe.from_options(model.rope_spec(), {"scales": "2-4", "window": 4, "topk": 4})
    with torch.no_grad():
        assert not torch.equal(model(x, method=other), full)   # the mask is used (6 steps: positions barely matter)


def test_weights_digest_follows_an_in_place_change(tiny):
    from lengen.hf.calibration import weights_digest

    before = weights_digest(tiny)
    assert weights_digest(tiny) == before
    with torch.no_grad():
        tiny.model.layers[0].self_attn.q_proj.weight[0, 0] += 1.0
    assert weights_digest(tiny) != before


def test_flex_passes_match_the_naive_reference():
    """The FlexAttention passes (CUDA's path; forced here: eager flex on CPU) with DPE's per-pair far q, k."""
    from lengen.kernels import flex_remap

    old = flex_remap.mode()
    flex_remap.set_mode("force")
    try:
        q, k, v = qkv(40)
        pos = torch.arange(40)[None]
        out = dpe(SPEC).attend(q.float(), k.float(), v.float(), pos, pos, 0.25)
    finally:
        flex_remap.set_mode(old)
    K, V = k.repeat_interleave(2, 1)[0], v.repeat_interleave(2, 1)[0]
    expected = naive_dpe(q[0], K, V, pos[0], pos[0], 6, PAIR_SCALE, MASK, 0.25)
    torch.testing.assert_close(out[0].double(), expected, atol=1e-4, rtol=0)


def test_composes_with_logn_per_layer():
    """dpe+logn: the layer's key pairs reach the composed method, and log-n scales q as for self_extend."""
    m = build_method(SPEC + "+logn", ROPE)
    m.remap.set_key_pairs({0: MASK, 1: ~MASK})
    layer0 = m.for_layer(0)
    assert torch.equal(layer0.remap.mask, MASK) and torch.equal(m.for_layer(1).remap.mask, ~MASK)
    assert m.for_layer(0) is layer0                                  # one composition per layer, kept
    T = 100
    q, k, v = qkv(T)
    pos = torch.arange(T)[None]
    logn = (torch.log(pos[0].double() + 1) / math.log(64)).clamp(min=1)[:, None]
    out = layer0.attend(q, k, v, pos, pos, 0.25)
    torch.testing.assert_close(out, dpe(SPEC).attend(q * logn, k, v, pos, pos, 0.25), atol=1e-6, rtol=0)
    assert (out - dpe(SPEC).attend(q, k, v, pos, pos, 0.25)).abs().max() > 1e-3


def test_soft_capped_gemma2_is_refused_before_any_calibration():
    pytest.importorskip("transformers")
    from hf_families import tiny_family

    from lengen.hf import extend

    # no calibration text and no folder: the refusal must come from the layer check, first
    with pytest.raises(LengenError, match="soft-caps its attention logits"):
        extend(tiny_family("gemma2", "eager"), "dpe:scales=2-3-4-8,window=12")
