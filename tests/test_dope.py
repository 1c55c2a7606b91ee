"""DoPE (lengen.extrapolation.dope) against hand computations: the entropy score on small matrices
whose eigenvalues are known by hand, the global head selection, and the attention against a naive
per-pair loop in float64 (each pair's rotation angle written out: the selected heads' low bands or
all bands unrotated)."""

import math

import pytest
import torch

from lengen.errors import LengenError
from lengen.extrapolation import RopeSpec, build_method
from lengen.extrapolation.dope import GramScores, choose_heads, effective_rank, select_heads

ROPE = RopeSpec(rotary_dim=8, base=10000.0, train_length=16)


def orthogonal(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))[0]


def test_effective_rank_of_hand_made_matrices():
    # X = [[1,0],[0,1],[1,1]]: X^T X = [[2,1],[1,2]], eigenvalues 3 and 1 -> p = (3/4, 1/4)
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert effective_rank(x.T @ x, rank=2) == pytest.approx(math.exp(h))
    assert effective_rank(x.T @ x, rank=0) == pytest.approx(math.exp(h))
    assert effective_rank(x.T @ x, rank=1) == pytest.approx(4 / 3)   # trace / top eigenvalue
    # the reference note's example: top eigenvalues 0.70, 0.10, 0.10, 0.05 of a normalised Gram -> 2.35
    u = orthogonal(6)
    gram = u @ torch.diag(torch.tensor([0.70, 0.10, 0.10, 0.05, 0.03, 0.02], dtype=torch.float64)) @ u.T
    assert effective_rank(gram, rank=4) == pytest.approx(2.35, abs=0.005)
    assert effective_rank(u @ torch.eye(6, dtype=torch.float64) @ u.T, rank=4) == pytest.approx(4.0)
    assert effective_rank(torch.eye(6, dtype=torch.float64), rank=1) == pytest.approx(6.0)
    assert effective_rank(torch.diag(torch.tensor([1.0, 1.0, 0.0, 0.0])), rank=0) == pytest.approx(2.0)
    assert math.isnan(effective_rank(torch.zeros(3, 3), rank=2))


def test_heads_are_ranked_over_all_layers():
    scores = [torch.tensor([3.0, 1.0, 5.0]), torch.tensor([2.0, float("nan"), 4.0])]
    asc = select_heads(scores, 2, "asc")
    assert [m.tolist() for m in asc] == [[False, True, False], [True, False, False]]
    desc = select_heads(scores, 2, "desc")
    assert [m.tolist() for m in desc] == [[False, False, True], [False, False, True]]
    every = select_heads(scores, 10, "asc")   # more than there are: every head with a score
    assert [m.tolist() for m in every] == [[True, True, True], [True, False, True]]
    assert not any(m.any() for m in select_heads(scores, 0, "asc"))


def ntk_inv_freq(d, base, L0, factor, n):
    """emozilla's dynamic NTK at length n > L0, written out."""
    b = base * (factor * n / L0 - (factor - 1)) ** (d / (d - 2))
    return [b ** (-2 * j / d) for j in range(d // 2)]


def naive(q, k, v, heads, inv_freq, L0, mode):
    """softmax over keys j <= i of q_i . k_j / sqrt(d), every pair rotated by its own angle."""
    B, H, T, d = q.shape
    half = d // 2
    out = torch.zeros(B, H, T, d, dtype=torch.float64)
    for h in range(H):
        selected = heads is not None and bool(heads[h])
        for i in range(T):
            logits = []
            for j in range(i + 1):
                dot = 0.0
                for f in range(half):
                    low = inv_freq[f] < 2 * math.pi / L0
                    if selected and mode == "keep_low" and not low:
                        continue                                  # channels zeroed
                    rotate = not (selected and (mode == "all" or (mode == "parts" and low)))
                    a_i, a_j = (i * inv_freq[f], j * inv_freq[f]) if rotate else (0.0, 0.0)
                    qx, qy = float(q[0, h, i, f]), float(q[0, h, i, f + half])
                    kx, ky = float(k[0, h, j, f]), float(k[0, h, j, f + half])
                    qr = (qx * math.cos(a_i) - qy * math.sin(a_i), qy * math.cos(a_i) + qx * math.sin(a_i))
                    kr = (kx * math.cos(a_j) - ky * math.sin(a_j), ky * math.cos(a_j) + kx * math.sin(a_j))
                    dot += qr[0] * kr[0] + qr[1] * kr[1]
                logits.append(dot / math.sqrt(d))
            w = torch.softmax(torch.tensor(logits, dtype=torch.float64), 0)
            out[0, h, i] = (w[:, None] * v[0, h, : i + 1].double()).sum(0)
    return out


def qkv(T=24, H=3, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, H, T, d, generator=g, dtype=torch.float64) for _ in range(3)]


@pytest.mark.parametrize("mode", ["all", "parts", "keep_low"])
def test_attention_equals_the_per_pair_loop(mode):
    method = build_method(f"dope:factor=2,mode={mode}", ROPE)
    layer = method.with_heads(torch.tensor([False, True, True]))
    assert method.heads is None                  # a copy: the method itself is unchanged
    q, k, v = qkv()
    pos = torch.arange(24)[None]
    got = layer.attend(q, k, v, pos, pos)
    want = naive(q, k, v, [False, True, True], ntk_inv_freq(8, 10000.0, 16, 2.0, 24), 16, mode)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_no_selected_head_is_dynamic_ntk_and_grouped_queries_share_keys():
    q, k, v = qkv(T=20, H=4)
    k, v = k[:, :2], v[:, :2]                     # 2 key heads for 4 query heads
    pos = torch.arange(20)[None]
    dope = build_method("dope:factor=2", ROPE)
    dynamic = build_method("dynamic:factor=2", ROPE)
    torch.testing.assert_close(dope.attend(q, k, v, pos, pos), dynamic.attend(q, k, v, pos, pos))
    # query head 1 selected: its copy of key head 0 is unrotated, head 0's (same key head) is not
    layer = dope.with_heads(torch.tensor([False, True, False, False]))
    want = naive(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), [False, True, False, False],
                 ntk_inv_freq(8, 10000.0, 16, 2.0, 20), 16, "all")
    torch.testing.assert_close(layer.attend(q, k, v, pos, pos).double(), want, rtol=1e-5, atol=1e-5)


def test_a_band_at_exactly_one_turn_over_the_trained_length_keeps_its_rotation():
    L0 = 16
    layer = build_method("dope:factor=2,mode=parts", ROPE).with_heads(torch.tensor([True]))
    inv_freq = [1.0, 2 * math.pi / L0, 0.5 * 2 * math.pi / L0, 0.01]   # pair 1 is on the boundary
    q, k, v = qkv(T=12, H=1)
    pos = torch.arange(12)[None]
    got = layer.attention(q, k, v, pos, pos, torch.tensor(inv_freq, dtype=torch.float64), 1.0, 8 ** -0.5)
    want = naive(q, k, v, [True], inv_freq, L0, "parts")
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec, words", [
    ("dope", "factor is required"),
    ("dope:factor=2,mode=gauss", "mode must be one of"),
    ("dope:factor=2,order=up", "order must be asc or desc"),
    ("dope:factor=2,count=-1", "count"),
    ("dope:factor=2,rank=-2", "rank"),
    ("dope:factor=2,heads=3", "unknown option"),
])
def test_bad_options_are_one_line(spec, words):
    with pytest.raises(LengenError, match=words) as e:
        build_method(spec, ROPE)
    assert "\n" not in str(e.value)


def test_gram_scores_rank_heads_by_their_queries():
    """Three heads of planted query geometry: head 0 rank one, head 1 two equal directions, head 2
    isotropic in 4 of 8 channels; stage=pre, so the Gram is of the queries as given."""
    dope = build_method("dope:factor=2,rank=0,count=1", ROPE)
    reducer = GramScores(dope, stage="pre")
    g = torch.Generator().manual_seed(0)
    t = 64
    q = torch.zeros(1, 3, t, 8, dtype=torch.float64)
    q[0, 0, :, 0] = torch.randn(t, generator=g, dtype=torch.float64)
    q[0, 1, :, :2] = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64).repeat(t // 2, 1)
    q[0, 2, :, :4] = torch.eye(4, dtype=torch.float64).repeat(t // 4, 1)
    k = torch.randn(1, 1, t, 8, generator=g, dtype=torch.float64)
    reducer(0, q, k)
    reducer(3, q.flip(1), k)                      # a second layer with the heads reversed
    scores = reducer.scores()
    torch.testing.assert_close(scores[0], torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64))
    torch.testing.assert_close(scores[3], torch.tensor([4.0, 2.0, 1.0], dtype=torch.float64))
    heads = choose_heads(dope, scores)           # count 1, asc: the first rank-one head
    assert heads[0].tolist() == [True, False, False] and heads[3].tolist() == [False, False, False]
    layer = dope
    layer.set_heads(heads)
    assert layer.for_layer(0).heads.tolist() == [True, False, False]
    assert layer.for_layer(5).heads is None       # a layer calibration did not see: no head


# ---- lengen.hf: calibration and extension of a tiny Llama ------------------------------------------
@pytest.fixture
def tiny(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    from test_hf_extend import tiny as tiny_model

    monkeypatch.setenv("LENGEN_CACHE", str(tmp_path / "cache"))
    return tiny_model("sdpa")


def token_ids(batch=1, length=64, seed=3):
    return torch.randint(0, 100, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_no_head_is_dynamic_ntk_and_every_head_denoised_is_the_model_without_rope(tiny):
    import copy

    from lengen.hf import extend, restore

    ids = token_ids(2, 64)
    extend(tiny, "dynamic:factor=2")
    want = tiny(ids).logits
    restore(tiny)
    extend(tiny, "dope:factor=2,count=0")
    torch.testing.assert_close(tiny(ids).logits, want)
    restore(tiny)
    # every head of both layers denoised (count 8 of 2 x 4): transformers' own forward, inv_freq 0
    nope = copy.deepcopy(tiny)
    nope.model.rotary_emb.inv_freq.zero_()
    want = nope(ids).logits
    extend(tiny, "dope:factor=2,count=8,mode=all", calibration=token_ids())
    torch.testing.assert_close(tiny(ids).logits, want, rtol=1e-4, atol=1e-4)
    restore(tiny)
    torch.testing.assert_close(tiny(ids).logits, tiny(ids).logits)


def test_calibration_picks_count_heads_caches_their_scores_and_rebuilds_a_damaged_file(tiny, capsys):
    import lengen.hf.calibration as cal
    from lengen.hf import extend, restore
    from lengen.hf.extensions import EXTENDED
    from lengen.hf.patch import capture_qk

    method = build_method("dope:factor=2,count=3,rank=4", RopeSpec(rotary_dim=16, train_length=32))
    heads = cal.dope_heads(tiny, method, capture_qk, token_ids())
    assert sorted(heads) == [0, 1] and sum(int(m.sum()) for m in heads.values()) == 3
    files = list((cal.io.cache_root() / "dope").glob("*.json"))
    assert len(files) == 1
    fewer = build_method("dope:factor=2,count=1,rank=4", RopeSpec(rotary_dim=16, train_length=32))
    one = cal.dope_heads(tiny, fewer, lambda *a, **k: pytest.fail("calibrated again"), token_ids())
    assert sum(int(m.sum()) for m in one.values()) == 1
    assert all((one[layer] <= heads[layer]).all() for layer in one)   # the best of the three
    assert capsys.readouterr().err == ""
    files[0].write_text('{"settings": {}, "layers": {}}')
    again = cal.dope_heads(tiny, method, capture_qk, token_ids())
    err = capsys.readouterr().err
    assert str(files[0]) in err and "holds the head scores of other settings" in err
    assert all(torch.equal(again[layer], heads[layer]) for layer in heads)
    extend(tiny, "dope:factor=2,count=3,rank=4", calibration=token_ids())
    plans = EXTENDED[tiny].plans
    assert all(torch.equal(plans[layer].method.heads, heads[layer]) for layer in heads)
    restore(tiny)


def test_extend_without_text_or_folder_is_refused(tiny):
    from lengen.hf import extend, restore

    with pytest.raises(LengenError, match="dope: calibrating the heads needs text.*count=0"):
        extend(tiny, "dope:factor=2")
    extend(tiny, "dope:factor=2,count=0")     # no head: no calibration
    restore(tiny)


def test_lm_eval_chooses_heads_on_a_validation_window_and_all_heads_denoised_is_nope(tmp_path, monkeypatch):
    from tiny_lm import TINY

    from lengen.cli import main
    from lengen.lm.evaluate import load_run
    from lengen.lm.methods import ResolvedMethod, calibrate_methods

    monkeypatch.setenv("LENGEN_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    assert main(["lm", "train", *TINY, "--steps", "6", "--out", str(out)]) == 0
    assert main(["lm", "eval", str(out), "--methods", "rope,dope:factor=2,count=1", "--lengths", "16,48",
                 "--docs", "2", "--no-progress"]) == 0
    cfg, model = load_run(out)
    every = build_method("dope:factor=2,count=100", model.rope_spec())
    calibrate_methods([ResolvedMethod("dope", every)], model, cfg.corpus, cfg.val_fraction)
    assert all(m.all() for m in every.layer_heads.values()) and len(every.layer_heads) == model.cfg.num_layers
    one = build_method("dope:factor=2,count=1", model.rope_spec())
    calibrate_methods([ResolvedMethod("dope", one)], model, cfg.corpus, cfg.val_fraction)
    assert sum(int(m.sum()) for m in one.layer_heads.values()) == 1
    # every head denoised with mode=all: the model's attention without any rotation, at every layer
    x = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(0))
    zero = build_method("pi:factor=1e12", model.rope_spec())        # angles ~ 0: RoPE switched off
    with torch.no_grad():
        torch.testing.assert_close(model(x, method=every), model(x, method=zero), atol=1e-4, rtol=1e-4)
        assert not torch.equal(model(x, method=one), model(x, method=every))
