"""Dual Chunk Attention, STRING and longrope (docs/training_free.md): the r(i, j) maps of the reference
note's worked examples, a naive per-pair reference (explicit rotation matrices, float64 softmax),
identities, incremental decoding, transformers' own longrope, and the configs lengen.hf reads."""

import math
import warnings

import pytest
import torch
from tiny_llama import decode_step, returned_cache

from lengen.errors import LengenError
from lengen.extrapolation import METHODS, RopeSpec, build_method
from lengen.kernels import lse_attention

D = 8
ROPE = RopeSpec(rotary_dim=D, base=10000.0, train_length=32)

DCA_8_2_T20 = """
0
1 0
2 1 0
3 2 1 0
4 3 2 1 0
5 4 3 2 1 0
6 5 4 3 2 1 0
7 6 5 4 3 2 1 0
8 7 6 5 4 3 2 1 0
8 7 6 5 4 3 3 2 1 0
8 7 6 5 4 3 4 3 2 1 0
8 7 6 5 4 3 5 4 3 2 1 0
8 7 6 5 4 3 6 5 4 3 2 1 0
8 7 6 5 4 3 7 6 5 4 3 2 1 0
8 7 6 5 4 3 8 7 6 5 4 3 2 1 0
8 7 6 5 4 3 8 7 6 5 4 3 3 2 1 0
8 7 6 5 4 3 8 7 6 5 4 3 4 3 2 1 0
8 7 6 5 4 3 8 7 6 5 4 3 5 4 3 2 1 0
8 7 6 5 4 3 8 7 6 5 4 3 6 5 4 3 2 1 0
8 7 6 5 4 3 8 7 6 5 4 3 7 6 5 4 3 2 1 0
"""

STRING_6_2_T16 = """
0
1 0
2 1 0
3 2 1 0
4 3 2 1 0
5 4 3 2 1 0
2 5 4 3 2 1 0
3 2 5 4 3 2 1 0
4 3 2 5 4 3 2 1 0
5 4 3 2 5 4 3 2 1 0
6 5 4 3 2 5 4 3 2 1 0
7 6 5 4 3 2 5 4 3 2 1 0
8 7 6 5 4 3 2 5 4 3 2 1 0
9 8 7 6 5 4 3 2 5 4 3 2 1 0
10 9 8 7 6 5 4 3 2 5 4 3 2 1 0
11 10 9 8 7 6 5 4 3 2 5 4 3 2 1 0
"""


def lower_triangle(text):
    rows = [[float(x) for x in line.split()] for line in text.strip().splitlines()]
    T = len(rows)
    out = torch.full((T, T), math.nan, dtype=torch.float64)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.tensor(row)
    return out


# ---- per-pair references, written from the three cases of ChunkLlama's code and STRING's Eq. 4 ---
def r_dca(i, j, chunk_size, local_size):
    """Query position by chunk distance (intra / successive / inter), key position o(j)."""
    s = chunk_size - local_size
    if j > i:
        return math.nan
    ni, nj, oi, oj = i // s, j // s, i % s, j % s
    if ni == nj:
        pq = oi
    elif ni - nj == 1:
        pq = min(s + oi, chunk_size)
    else:
        pq = min(2 * s - 1, chunk_size)
    return float(pq - oj)


def r_string(i, j, shift, window):
    if j > i:
        return math.nan
    return float(i - j if i - j < shift else i - j - shift + window)


def reference_map(r_fn, pos_q, pos_k):
    return torch.tensor([[r_fn(int(i), int(j)) for j in pos_k] for i in pos_q], dtype=torch.float64)


def rotation(r, inv_freq):
    """The d x d rotation of the half-split layout: channel pair (c, c + d/2) by angle r theta_c."""
    d = 2 * inv_freq.numel()
    R = torch.zeros(d, d, dtype=torch.float64)
    for c, theta in enumerate(inv_freq.double().tolist()):
        a = r * theta
        R[c, c], R[c, c + d // 2] = math.cos(a), -math.sin(a)
        R[c + d // 2, c], R[c + d // 2, c + d // 2] = math.sin(a), math.cos(a)
    return R


def naive_attention(q, k, v, pos_q, pos_k, r_fn, inv_freq, logit_factor=1.0):
    """O(T^2) loop: score(i, j) = (R(r(i, j)) q_i) . k_j / sqrt(d) * logit_factor; float64 softmax
    over the pairs with r defined. q, k, v [B, H, T, d]; positions [B|1, T] (integers)."""
    B, H, Tq, _ = q.shape
    out = torch.zeros(B, H, Tq, v.shape[-1], dtype=torch.float64)
    cache = {}
    for b in range(B):
        pq, pk = pos_q[min(b, pos_q.shape[0] - 1)], pos_k[min(b, pos_k.shape[0] - 1)]
        for i in range(Tq):
            rs = [r_fn(int(pq[i]), int(p)) for p in pk]
            keys = [j for j, r in enumerate(rs) if not math.isnan(r)]
            for h in range(H):
                scores = []
                for j in keys:
                    if rs[j] not in cache:
                        cache[rs[j]] = rotation(rs[j], inv_freq)
                    scores.append((cache[rs[j]] @ q[b, h, i].double()) @ k[b, h, j].double())
                s = torch.stack(scores) * D ** -0.5 * logit_factor
                out[b, h, i] = torch.softmax(s, 0) @ v[b, h, keys].double()
    return out


def qkv(B=2, H=2, T=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3)]


# ---- r(i, j) maps ------------------------------------------------------------------------------
def test_dca_map_is_the_worked_example():
    pos = torch.arange(20)[None]
    r = build_method("dca:chunk_size=8,local_size=2", ROPE).relative_positions(pos, pos)[0]
    torch.testing.assert_close(r, lower_triangle(DCA_8_2_T20), equal_nan=True)


def test_string_map_is_the_worked_example():
    pos = torch.arange(16)[None]
    r = build_method("string:shift=6,window=2", ROPE).relative_positions(pos, pos)[0]
    torch.testing.assert_close(r, lower_triangle(STRING_6_2_T16), equal_nan=True)


@pytest.mark.parametrize("chunk,local", [(8, 2), (9, 3), (7, 0), (10, 6), (12, 11), (5, 1)])
def test_dca_map_matches_the_three_case_definition(chunk, local):
    pos = torch.arange(57)
    r = build_method(f"dca:chunk_size={chunk},local_size={local}", ROPE).relative_positions(pos[None], pos[None])[0]
    ref = reference_map(lambda i, j: r_dca(i, j, chunk, local), pos, pos)
    torch.testing.assert_close(r, ref, equal_nan=True)
    assert r.nan_to_num(0).max() <= min(chunk, 2 * (chunk - local) - 1)


@pytest.mark.parametrize("shift,window", [(6, 2), (10, 0), (5, 4), (1, 0)])
def test_string_map_matches_the_formula(shift, window):
    pos = torch.arange(41)
    r = build_method(f"string:shift={shift},window={window}", ROPE).relative_positions(pos[None], pos[None])[0]
    torch.testing.assert_close(r, reference_map(lambda i, j: r_string(i, j, shift, window), pos, pos),
                               equal_nan=True)


# ---- attention against the naive reference -------------------------------------------------------
CASES = {  # spec: (r_fn, logit factor); small blocks so that T = 40 spans several chunks and blocks
    "dca:chunk_size=8,local_size=2,block=5": (lambda i, j: r_dca(i, j, 8, 2), 1.0),
    "dca:chunk_size=9,local_size=3,block=4": (lambda i, j: r_dca(i, j, 9, 3), 1.0),
    "dca:chunk_size=10,local_size=6,block=7": (lambda i, j: r_dca(i, j, 10, 6), 1.0),
    "dca:chunk_size=6,local_size=0,block=6": (lambda i, j: r_dca(i, j, 6, 0), 1.0),
    "string:shift=6,window=2,block=5": (lambda i, j: r_string(i, j, 6, 2), (1 + 0.1 * math.log(2)) ** 2),
    "string:shift=11,window=3,block=4,attention_factor=1": (lambda i, j: r_string(i, j, 11, 3), 1.0),
}


def layouts(T=40):
    g = torch.Generator().manual_seed(3)
    sample = lambda: torch.randperm(120, generator=g)[:T].sort().values  # noqa: E731
    return {"arange": torch.arange(T)[None], "offset": torch.arange(T)[None] + 13,
            "per_batch": torch.stack([sample(), sample()])}


@pytest.fixture(params=[True, False], ids=["fused", "matmul"])
def fused(request, monkeypatch):
    monkeypatch.setattr(lse_attention, "USE_FUSED", request.param)
    return request.param


@pytest.mark.parametrize("layout", list(layouts()))
@pytest.mark.parametrize("spec", list(CASES))
def test_attention_matches_naive_reference(spec, layout, fused):
    method = build_method(spec, ROPE)
    r_fn, logit_factor = CASES[spec]
    q, k, v = qkv()
    pos = layouts()[layout]
    inv_freq, _ = method.rope_params(0)
    ref = naive_attention(q, k, v, pos, pos, r_fn, inv_freq, logit_factor)
    for name, (rows, keys) in {"prefill": (slice(None), slice(None)), "decode": (slice(-1, None), slice(None)),
                               "chunk_mid": (slice(-17, -6), slice(None, -6))}.items():
        out = method.attend(q[:, :, rows], k[:, :, keys], v[:, :, keys], pos[:, rows], pos[:, keys])
        torch.testing.assert_close(out, ref[:, :, rows], atol=1e-6, rtol=1e-6, msg=name)


def test_dca_composes_with_yarn_and_has_a_temperature():
    method = build_method("yarn:factor=4+dca:chunk_size=8,local_size=2,block=6,original_length=16", ROPE)
    q, k, v = qkv(T=37)
    pos = torch.arange(37)[None]
    inv_freq, af = method.rope_params(37)
    assert af > 1 and not torch.equal(inv_freq, build_method("rope", ROPE).rope_params(37)[0])
    m = 1 + 0.1 * math.log(37 / 16)
    ref = naive_attention(q, k, v, pos, pos, lambda i, j: r_dca(i, j, 8, 2), inv_freq, (af * m) ** 2)
    torch.testing.assert_close(method.attend(q, k, v, pos, pos), ref, atol=1e-6, rtol=1e-6)


def test_identities_with_plain_rope():
    q, k, v = qkv(T=30)
    pos = torch.arange(30)[None]
    plain = build_method("rope", ROPE).attend(q, k, v, pos, pos)
    for spec in ["dca:chunk_size=30,local_size=0", "dca:chunk_size=30,local_size=5,block=4",
                 "dca:chunk_size=64", "string:shift=0", "string:shift=0,window=0",
                 "string:shift=30,window=3,attention_factor=1"]:
        torch.testing.assert_close(build_method(spec, ROPE).attend(q, k, v, pos, pos), plain,
                                   atol=1e-10, rtol=1e-10, msg=spec)
    # below the shift STRING is plain RoPE times its constant attention factor (logits x af^2)
    got = build_method("string:shift=30,window=3", ROPE).attend(q, k, v, pos, pos)
    want = build_method("rope", ROPE).attend(q * (1 + 0.1 * math.log(2)) ** 2, k, v, pos, pos)
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


def test_defaults_and_refusals():
    L0 = RopeSpec(rotary_dim=D, train_length=4096)
    dca = build_method("dca", L0)
    assert (dca.chunk_size, dca.local_size, dca.s, dca.C) == (3072, 512, 2560, 3072)
    s = build_method("string", RopeSpec(rotary_dim=D, train_length=131072))
    assert (s.shift, s.local) == (43253, 128)
    for bad in ["dca:chunk_size=8,local_size=8", "dca:chunk_size=8,local_size=9", "string:shift=6,window=6",
                "longrope", "longrope:short_factor=1/1/1/1", "longrope:short_factor=1/1,long_factor=1/1"]:
        with pytest.raises(LengenError):
            build_method(bad, ROPE)
    assert {"dca", "string", "longrope"} <= set(METHODS.names())


# ---- longrope -----------------------------------------------------------------------------------
def test_longrope_values_of_the_reference_note():
    spec = "longrope:short_factor=1/1/1.2/1.5,long_factor=1/2/4/8,factor=4"
    m = build_method(spec, ROPE)   # d 8, b 1e4, L0 32, max_pos 128 -> factor 4
    short, af = m.rope_params(32)
    long, af2 = m.rope_params(33)
    torch.testing.assert_close(short, torch.tensor([1, 0.1, 0.008333333, 0.0006666667]), rtol=1e-6, atol=0)
    torch.testing.assert_close(long, torch.tensor([1, 0.05, 0.0025, 0.000125]), rtol=1e-6, atol=0)
    assert af == af2 and abs(af - math.sqrt(1.4)) < 1e-12
    assert abs(build_method(spec.replace("factor=4", "factor=2"), ROPE).rope_params(1)[1] - math.sqrt(1.2)) < 1e-12
    assert build_method(spec + ",attention_factor=1.5", ROPE).rope_params(1)[1] == 1.5
    assert m.length_dependent


# ---- incremental decoding (lengen.lm's KV cache) -----------------------------------------------
LM_SPECS = ["dca:chunk_size=10,local_size=3,block=4", "string:shift=7,window=2", "yarn:factor=4+dca:chunk_size=8",
            "string:shift=9,window=3+logn", "longrope:short_factor=1/1.1/1.3/1.6,long_factor=1/2/4/8,factor=3"]


@pytest.mark.parametrize("spec", LM_SPECS)
def test_incremental_decoding_equals_full_forward(spec):
    """Through lengen.lm's own method resolution (what `lengen lm eval --methods` calls)."""
    from test_lm_cache import CHUNKS, ONE_BY_ONE, assert_incremental_matches_full, ids, tiny

    from lengen.lm.methods import resolve_methods
    model = tiny()   # head dim 8, training length 16: the 48 tokens span several chunks
    method = resolve_methods([spec], model)[0].method
    x = ids()
    assert_incremental_matches_full(model, method, x, ONE_BY_ONE)
    assert_incremental_matches_full(model, method, x, CHUNKS)


# ---- lengen.hf: transformers' own longrope, and the configs extend() reads ----------------------
HF_L0 = 32
SHORT = [1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 1.8, 2.0]           # head_dim 16: 8 factors
LONG = [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0]


def hf_tiny(model_type="llama", rope_parameters=None, **extra):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    kwargs = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=100, max_position_embeddings=4 * HF_L0,
                  initializer_range=0.1)
    kwargs["rope_parameters"] = rope_parameters or {"rope_type": "default", "rope_theta": 10000.0}
    kwargs.update(extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(model_type, **kwargs)
        return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": SHORT, "long_factor": LONG,
            "original_max_position_embeddings": HF_L0}


@torch.no_grad()
@pytest.mark.parametrize("model_type,length", [("llama", 20), ("llama", HF_L0), ("llama", HF_L0 + 1), ("llama", 80),
                                               ("phi3", 20), ("phi3", 80)])
def test_longrope_matches_transformers(model_type, length):
    # Phi-3 is the model family longrope was made for (fused qkv projection, its own rotary module)
    from lengen.hf import extend, restore
    # Phi-3's config defaults: a 2,047-token sliding window, pad id 32,000, and its own
    # original_max_position_embeddings field (4,096), which its longrope reads instead of rope_parameters'
    extra = {"sliding_window": None, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
             "original_max_position_embeddings": HF_L0} if model_type == "phi3" else {}
    ids = torch.randint(0, 100, (2, length), generator=torch.Generator().manual_seed(1))
    reference = hf_tiny(model_type, rope_parameters=LONGROPE, **extra)
    want = reference(ids).logits
    plain = hf_tiny(model_type, **extra)
    before = plain(ids).logits
    # user-given factors on a plain-RoPE model of the same weights (factor = 128 / 32 as HF's default)
    extend(plain, "longrope", short_factor=SHORT, long_factor=LONG, factor=4, train_length=HF_L0)
    torch.testing.assert_close(plain(ids).logits, want, atol=1e-5, rtol=1e-5)
    restore(plain)
    torch.testing.assert_close(plain(ids).logits, before, atol=0, rtol=0)
    # the longrope model itself: extend() reads its config (factors, L0, factor) instead of refusing
    extend(reference, "longrope")
    torch.testing.assert_close(reference(ids).logits, want, atol=1e-5, rtol=1e-5)
    restore(reference)
    torch.testing.assert_close(reference(ids).logits, want, atol=0, rtol=0)
    assert not torch.allclose(want, before, atol=1e-4)   # longrope changes these logits at all


@torch.no_grad()
def test_longrope_decoding_with_the_cache_equals_full_forwards():
    from lengen.hf import extend
    model = hf_tiny(rope_parameters=LONGROPE)
    extend(model, "longrope")
    ids = torch.randint(0, 100, (1, 40), generator=torch.Generator().manual_seed(2))
    # prefill past L0: the long table throughout (a cache crossing L0 holds higher layers' states
    # computed with the short table, which no cache can avoid)
    cache = returned_cache(model(ids[:, :34], use_cache=True))
    for t in range(34, 40):
        step, cache = decode_step(model, ids[:, t:t + 1], cache)
        torch.testing.assert_close(step.logits[:, -1], model(ids[:, :t + 1]).logits[:, -1],
                                   atol=2e-5, rtol=1e-4)


def test_hf_extend_reads_configs_that_ask_for_a_method():
    from lengen.hf import extend, extension_of, restore
    model = hf_tiny(rope_parameters=LONGROPE)
    with pytest.raises(LengenError, match="longrope"):
        extend(model, "yarn:factor=4")
    extend(model, "longrope")
    spec = extension_of(model)
    assert spec.startswith("longrope:") and "factor=4.0" in spec and "/" in spec
    restore(model)
    dca_config = {"chunk_size": 24, "local_size": 4, "original_max_position_embeddings": 32}
    qwen = hf_tiny("qwen2", dual_chunk_attention_config=dca_config)
    extend(qwen, "dca")
    assert extension_of(qwen) == "dca:chunk_size=24,local_size=4,original_length=32"
    restore(qwen)
    extend(qwen, "dca", chunk_size=16)   # a given option wins over the config
    assert extension_of(qwen) == "dca:chunk_size=16,local_size=4,original_length=32"
    restore(qwen)
    extend(qwen, "rerope:window=8")       # the config does not restrict other methods (HF: plain RoPE)
    restore(qwen)


@torch.no_grad()
@pytest.mark.parametrize("spec", ["dca:chunk_size=24,local_size=4,block=8", "string:shift=12,window=3",
                                  "yarn:factor=2+dca:chunk_size=20,local_size=3"])
def test_hf_extend_remaps_like_the_lm_attention(spec):
    """Through lengen.hf the new remapping methods give the logits of full forwards when decoding
    with transformers' cache, and differ from plain RoPE past their window."""
    from lengen.hf import extend
    model = hf_tiny()
    ids = torch.randint(0, 100, (1, 70), generator=torch.Generator().manual_seed(3))
    plain = model(ids).logits
    extend(model, spec)
    full = model(ids).logits
    assert not torch.allclose(full[:, -1], plain[:, -1], atol=1e-4)
    cache = returned_cache(model(ids[:, :50], use_cache=True))
    for t in range(50, 70):
        step, cache = decode_step(model, ids[:, t:t + 1], cache)
        torch.testing.assert_close(step.logits[:, -1], full[:, t], atol=2e-5, rtol=1e-4)
