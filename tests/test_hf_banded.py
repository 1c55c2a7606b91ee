"""lengen.hf.banded: sliding-window layers computed band by band (no T x T mask), checked against a
naive masked softmax kept here and against the same model on transformers' own sdpa."""

import inspect

import pytest
import torch

from lengen.extrapolation import blockwise
from lengen.kernels import lse_attention

transformers = pytest.importorskip("transformers")

from hf_families import WINDOW, tiny_family  # noqa: E402
from test_hf_extend import check_generate_equals_full_forwards, logits, tokens  # noqa: E402

from lengen.errors import LengenError  # noqa: E402
from lengen.hf import banded, extend, restore  # noqa: E402
from lengen.hf.extensions import route_of  # noqa: E402


def naive_window(q, k, v, window, scale):
    """Query row r is key index Tk - Tq + r and sees keys j with idx - window < j <= idx."""
    tq, tk = q.shape[-2], k.shape[-2]
    idx = torch.arange(tq)[:, None] + (tk - tq)
    j = torch.arange(tk)[None, :]
    allowed = (j <= idx) & (j > idx - window)
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    s = s.masked_fill(~allowed, float("-inf"))
    return (s.softmax(-1) @ v.double()).to(q.dtype)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("tq,tk,window,block", [
    (100, 100, 7, 16),     # prefill, block not a multiple of the window, last block short
    (100, 100, 40, 32),    # window larger than a block
    (1, 50, 8, 16),        # decoding one token against a cache
    (13, 60, 9, 4),        # a chunk of queries after cached keys
    (30, 30, 64, 16),      # window beyond the sequence: plain causal
])
def test_window_attention_matches_a_naive_masked_softmax(monkeypatch, fused, tq, tk, window, block):
    monkeypatch.setattr(lse_attention, "USE_FUSED", fused)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, t, 16, generator=g) for t in (tq, tk, tk))
    got = blockwise.window_attention(q, k, v, window, 0.3, block=block)
    torch.testing.assert_close(got, naive_window(q, k, v, window, 0.3), atol=1e-5, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_window_attention_on_cuda_matches_the_cpu_reference():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, t, 64, generator=g) for t in (300, 300, 300))
    got = blockwise.window_attention(*(x.cuda() for x in (q, k, v)), 40, 0.125, block=64)
    torch.testing.assert_close(got.cpu(), naive_window(q, k, v, 40, 0.125), atol=1e-4, rtol=0)


# --- the attention implementation on models with sliding-window layers ----------------------------

SLIDING = ["gemma3", "olmo3"]   # families with sliding layers that run on sdpa (Gemma 2: eager only)


def banded_model(name, **extra):
    model = tiny_family(name, "sdpa", **extra)
    banded.use(model)
    return model


@pytest.fixture
def mask_calls(monkeypatch):
    """Every mask transformers' sdpa_mask builds for a sliding-window layer (local_size given)."""
    import transformers.masking_utils as mu

    built, real = [], mu.sdpa_mask

    def recording(*args, **kwargs):
        out = real(*args, **kwargs)
        if kwargs.get("local_size") is not None:
            built.append(out)
        return out

    monkeypatch.setattr(mu, "sdpa_mask", recording)   # what banded_mask calls
    monkeypatch.setitem(type(mu.ALL_MASK_ATTENTION_FUNCTIONS)._global_mapping, "sdpa", recording)
    return built


@pytest.mark.parametrize("name", SLIDING)
def test_logits_equal_sdpa_and_no_sliding_mask_is_built(name, mask_calls):
    """64 tokens, window 8: the banded model's logits equal transformers' sdpa on the same weights,
    and no [B, 1, T, T] mask is built for the sliding layers (sdpa builds one)."""
    ids = tokens()
    reference = tiny_family(name, "sdpa")
    expected = logits(reference, ids)
    assert any(torch.is_tensor(m) and m.shape[-2:] == (64, 64) for m in mask_calls)
    mask_calls.clear()
    got = logits(banded_model(name), ids)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert mask_calls == []


@pytest.mark.parametrize("spec", ["yarn:factor=4", "dynamic:factor=4", "rerope:window=8+logn"])
@pytest.mark.parametrize("name", SLIDING)
def test_extended_model_equals_the_sdpa_extension(name, spec):
    """Each route of lengen.hf.extend on a banded model == on the sdpa model; restore() returns to
    the banded implementation with the unmodified logits."""
    ids = tokens()
    reference = tiny_family(name, "sdpa")
    extend(reference, spec)
    model = banded_model(name)
    base = logits(model, ids)
    extend(model, spec)
    torch.testing.assert_close(logits(model, ids), logits(reference, ids), atol=1e-5, rtol=0)
    assert route_of(model) == route_of(reference)
    restore(model)
    assert model.config._attn_implementation == banded.NAME
    assert torch.equal(logits(model, ids), base)


def test_rows_at_their_own_positions_get_the_band_row_by_row():
    """Dynamic NTK with rows at different positions (no padding) runs row by row; with
    train_length 4 < the window 8 the sliding layers take the method too, each row banded: equal
    to the same extension on sdpa."""
    ids = tokens()
    positions = torch.stack([torch.arange(64), torch.arange(64) + 40])
    reference = tiny_family("gemma3", "sdpa")
    extend(reference, "dynamic:factor=4", train_length=4)
    model = banded_model("gemma3")
    extend(model, "dynamic:factor=4", train_length=4)
    torch.testing.assert_close(logits(model, ids, position_ids=positions),
                               logits(reference, ids, position_ids=positions), atol=1e-5, rtol=0)


@pytest.mark.parametrize("spec", [None, "rerope:window=8+logn"])
def test_generate_with_kv_cache_equals_full_forwards(spec):
    """Decoding against sliding cache layers (transformers' own masks there) == full forwards
    (the band): 28 prompt + 8 new tokens cross the window and the trained length."""
    model = banded_model("gemma3")
    if spec:
        extend(model, spec)
    check_generate_equals_full_forwards(model, tokens(length=28), new_tokens=8)


def test_padded_batch_falls_back_to_transformers_masks(mask_calls):
    """A left-padded batch cannot be a band: sdpa's own mask is built and the logits equal sdpa's."""
    ids = tokens(length=40)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    expected = logits(tiny_family("gemma3", "sdpa"), ids, attention_mask=mask)
    mask_calls.clear()
    got = logits(banded_model("gemma3"), ids, attention_mask=mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert mask_calls and all(torch.is_tensor(m) for m in mask_calls)


def test_band_marker_only_for_the_exact_sliding_window():
    """The mask function hands out a Band only for the plain sliding causal window longer than the
    window; a chunked mask with the same local_size (Llama 4), a short input and padding get
    transformers' own mask."""
    from transformers.masking_utils import chunked_causal_mask_function, sliding_window_causal_mask_function

    def queries(n):   # transformers >= 5.2x: q_length; earlier 5.x: the queries' cache_position
        return {"cache_position": torch.arange(n)} if "cache_position" in sdpa_parameters else {"q_length": n}

    sdpa_parameters = inspect.signature(transformers.masking_utils.sdpa_mask).parameters
    common = dict(batch_size=1, kv_length=20, local_size=WINDOW, **queries(20))
    sliding = sliding_window_causal_mask_function(WINDOW)
    assert banded.banded_mask(mask_function=sliding, **common) == banded.Band(WINDOW)
    chunks = chunked_causal_mask_function(WINDOW, torch.zeros(1, dtype=torch.long))
    chunked = banded.banded_mask(mask_function=chunks, **common)
    assert torch.is_tensor(chunked) and chunked.shape == (1, 1, 20, 20)
    short = banded.banded_mask(mask_function=sliding, **{**common, "kv_length": 6, **queries(6)})
    assert short is None or torch.is_tensor(short)
    padded = torch.ones(1, 20, dtype=torch.long)
    padded[0, :3] = 0
    assert torch.is_tensor(banded.banded_mask(mask_function=sliding, attention_mask=padded, **common))


def test_use_refuses_what_it_cannot_band():
    with pytest.raises(LengenError, match="sdpa"):
        banded.use(tiny_family("gemma3", "eager"))
    model = tiny_family("gemma3", "sdpa")
    extend(model, "rerope:window=8")
    with pytest.raises(LengenError, match="before lengen.hf.extend"):
        banded.use(model)


def test_eval_suggests_banded_only_where_sdpa_would_build_large_sliding_masks():
    from lengen.hf.loading import banded_hint

    gemma = tiny_family("gemma3", "sdpa")
    hint = banded_hint(gemma, "sdpa", 4 * WINDOW)
    assert hint and "2 of 4 layers" in hint and "--attn banded" in hint
    assert banded_hint(gemma, "sdpa", 4 * WINDOW - 1) is None       # short inputs: no matter
    assert banded_hint(gemma, "banded", 1000) is None
    assert banded_hint(tiny_family("olmo2", "sdpa"), "sdpa", 1000) is None   # no sliding layers


def test_math_kernel_only_for_grouped_query_layers_on_cuda_in_float32():
    """PyTorch's flash kernel needs fp16/bf16 and its memory-efficient one takes no `enable_gqa`,
    so only CUDA + float32 + fewer key/value heads than query heads lands on the math kernel."""
    f32, bf16 = torch.float32, torch.bfloat16
    assert banded.gqa_falls_to_math("cuda", f32, 4, 1)
    assert banded.gqa_falls_to_math("cuda", f32, 9, 3)
    assert not banded.gqa_falls_to_math("cuda", f32, 4, 4)     # no grouping: no enable_gqa
    assert not banded.gqa_falls_to_math("cuda", bf16, 4, 1)    # flash takes it
    assert not banded.gqa_falls_to_math("cpu", f32, 4, 1)


@pytest.fixture
def sdpa_keys(monkeypatch):
    """The key-head count of every call of transformers' sdpa attention function."""
    import transformers.integrations.sdpa_attention as sa

    heads, real = [], sa.sdpa_attention_forward

    def recording(module, query, key, value, attention_mask, **kwargs):
        heads.append((query.shape[1], key.shape[1]))
        return real(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setattr(sa, "sdpa_attention_forward", recording)   # what banded_attention calls
    return heads


def test_grouped_query_layers_get_repeated_keys_where_sdpa_would_take_the_math_kernel(monkeypatch, sdpa_keys):
    """Where gqa_falls_to_math says so (forced here: the CPU never does), the layers banded
    leaves to transformers' sdpa get keys and values repeated to the query's 4 heads, with logits
    equal to sdpa's; elsewhere their 2 key/value heads pass unchanged."""
    ids = tokens()
    expected = logits(tiny_family("gemma3", "sdpa"), ids)
    model = banded_model("gemma3")
    logits(model, ids)
    assert sdpa_keys == [(4, 2), (4, 2)]          # the two global layers, as the model has them
    sdpa_keys.clear()
    monkeypatch.setattr(banded, "gqa_falls_to_math", lambda *args: True)
    got = logits(model, ids)
    assert sdpa_keys == [(4, 4), (4, 4)]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_eval_warns_where_sdpa_would_score_a_grouped_query_model_on_the_math_kernel():
    from lengen.hf.loading import math_kernel_hint

    config = tiny_family("olmo2", "sdpa").config      # 4 query, 2 key/value heads
    cuda, cpu, f32 = torch.device("cuda"), torch.device("cpu"), torch.float32
    hint = math_kernel_hint(config, "sdpa", 65536, cuda, f32)
    assert hint and "4 x 65,536 x 65,536 scores (64 GiB)" in hint and "--attn banded" in hint
    assert math_kernel_hint(config, "sdpa", 8191, cuda, f32) is None     # 4 x 8192^2 x 4 B = 1 GiB
    assert "(1 GiB)" in math_kernel_hint(config, "sdpa", 8192, cuda, f32)
    assert math_kernel_hint(config, "banded", 65536, cuda, f32) is None
    assert math_kernel_hint(config, "sdpa", 65536, cuda, torch.bfloat16) is None
    assert math_kernel_hint(config, "sdpa", 65536, cpu, f32) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_banded_model_on_cuda_in_float32_needs_no_math_kernel():
    """On CUDA in float32 with the math kernel switched off, the banded Gemma 3 runs (transformers'
    sdpa alone would find no kernel for its grouped-query global layers) and equals the CPU."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    ids = tokens()
    expected = logits(banded_model("gemma3"), ids)
    model = banded_model("gemma3").cuda()
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        got = logits(model, ids.cuda()).cpu()
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_eval_and_tune_print_every_note_that_applies():
    from lengen.hf.loading import attention_hints

    gemma = tiny_family("gemma3", "sdpa")
    cpu = torch.device("cpu")
    assert [h.split(";")[0] for h in attention_hints(gemma, "sdpa", 4 * WINDOW, cpu)] == \
        ["note: 2 of 4 layers attend within a sliding window of 8 tokens"]
    assert attention_hints(gemma, "banded", 100_000, cpu) == []
    assert attention_hints(gemma, "sdpa", 4 * WINDOW - 1, cpu) == []
    olmo = tiny_family("olmo2", "sdpa")          # grouped-query, no sliding layers
    assert "math kernel" in attention_hints(olmo, "sdpa", 65536, torch.device("cuda"))[0]
    assert attention_hints(olmo, "sdpa", 65536, torch.device("cuda"), "bf16") == []   # autocast: bfloat16
