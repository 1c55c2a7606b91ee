"""lengen.hf.extend / restore on tiny random Llama-family models (fp32, seeded, CPU, fast)."""

import math
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402

from lengen.errors import LengenError  # noqa: E402
from lengen.hf import extend, extension_of, restore  # noqa: E402

TRAIN = 32  # max_position_embeddings of the tiny models: 64-token inputs are 2x beyond it
ALL_METHODS = ["pi:factor=4", "ntk:factor=4", "dynamic:factor=4", "yarn:factor=4", "llama3:factor=4",
               "rerope:window=8", "leaky_rerope:window=8,factor=4", "self_extend:group=3,window=8",
               "lambda:window=16", "sinks:window=12", "rerope:window=8+logn", "dynamic:factor=2+logn"]


def tiny(impl="eager", model_type="llama", **extra):
    """A 2-layer model with grouped-query attention; init_range 0.1 makes positions matter."""
    torch.manual_seed(0)
    kwargs = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=100, max_position_embeddings=TRAIN,
                  initializer_range=0.1, rope_theta=10000.0)
    kwargs.update(extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if model_type == "llama":
            return LlamaForCausalLM._from_config(LlamaConfig(**kwargs), attn_implementation=impl).eval()
        cls = transformers.AutoConfig.for_model(model_type, **kwargs)
        return transformers.AutoModelForCausalLM.from_config(cls, attn_implementation=impl).eval()


def tokens(batch=2, length=64, seed=1):
    return torch.randint(0, 100, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def logits(model, ids, **kw):
    return model(ids, **kw).logits


# --- frequency methods against transformers' own rope_parameters ---------------------------------

HF_ROPE = {
    "pi": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": TRAIN},
    "llama3": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": TRAIN},
}


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("name", list(HF_ROPE))
def test_frequency_methods_match_transformers_rope_parameters(name, impl):
    model, ids = tiny(impl), tokens()
    extend(model, name, factor=4)
    ours = logits(model, ids)
    reference = tiny(impl, rope_parameters={**HF_ROPE[name], "rope_theta": 10000.0})
    reference.load_state_dict(model.state_dict())
    theirs = logits(reference, ids)
    assert not torch.allclose(theirs, logits(tiny(impl), ids), atol=1e-3)  # the method matters
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


# --- remapping methods -------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["rerope:window=64", "leaky_rerope:window=8,factor=1",
                                  "self_extend:window=64,group=4"])
def test_remapping_without_effect_is_the_original_model(spec):
    model, ids = tiny("sdpa"), tokens()
    base = logits(model, ids)
    extend(model, spec)
    torch.testing.assert_close(logits(model, ids), base, atol=1e-5, rtol=0)


def reference_forward(model, ids, rel, logn_train=None):
    """The tiny Llama written out by hand in float64, with every (query i, key j) pair scored at
    relative position rel(i, j) (q rotated by rel, key unrotated) and a full causal softmax."""
    cfg, m = model.config, model.model
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    d = cfg.hidden_size // heads
    B, T = ids.shape
    W = lambda lin: lin.weight.double()  # noqa: E731
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    angle = rel(i.double(), j.double())[..., None] * inv_freq          # [T, T, d/2]
    cos, sin = angle.cos(), angle.sin()

    def rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps) * weight.double()

    x = m.embed_tokens.weight.double()[ids]
    for layer in m.layers:
        a, h = layer.self_attn, rms(x, layer.input_layernorm.weight)
        q = (h @ W(a.q_proj).T).view(B, T, heads, d).transpose(1, 2)
        k = (h @ W(a.k_proj).T).view(B, T, kv_heads, d).transpose(1, 2).repeat_interleave(2, 1)
        v = (h @ W(a.v_proj).T).view(B, T, kv_heads, d).transpose(1, 2).repeat_interleave(2, 1)
        if logn_train:
            q = q * (torch.log(torch.arange(T) + 1.0) / math.log(logn_train)).clamp(min=1)[:, None]
        q1, q2, k1, k2 = q[..., : d // 2], q[..., d // 2:], k[..., : d // 2], k[..., d // 2:]
        # (R(r) q) . k for the half-split layout, per frequency, then summed
        dot = torch.einsum("bhid,bhjd->bhijd", q1, k1) + torch.einsum("bhid,bhjd->bhijd", q2, k2)
        cross = torch.einsum("bhid,bhjd->bhijd", q1, k2) - torch.einsum("bhid,bhjd->bhijd", q2, k1)
        scores = (dot * cos + cross * sin).sum(-1) / math.sqrt(d)
        scores = scores.masked_fill(j > i, float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + out @ W(a.o_proj).T
        h = rms(x, layer.post_attention_layernorm.weight)
        mlp = layer.mlp
        x = x + (torch.nn.functional.silu(h @ W(mlp.gate_proj).T) * (h @ W(mlp.up_proj).T)) @ W(mlp.down_proj).T
    return rms(x, m.norm.weight) @ W(model.lm_head).T


REMAPS = {
    "rerope:window=8": (lambda i, j: (i - j).clamp(max=8), None),
    "rerope:window=8+logn": (lambda i, j: (i - j).clamp(max=8), TRAIN),
    "leaky_rerope:window=8,factor=4": (
        lambda i, j: torch.where(i - j < 8, i - j, 8 + (i - j - 8) / 4), None),
    "self_extend:group=3,window=8": (   # grouped positions beyond W (float shift W - W/G)
        lambda i, j: torch.where(i - j < 8, i - j, (i // 3 + 8 - 8 / 3) - j // 3), None),
}


@pytest.mark.parametrize("impl,spec", [("sdpa", s) for s in REMAPS] + [("eager", "rerope:window=8")])
def test_remapping_matches_a_naive_per_pair_forward(spec, impl):
    model, ids = tiny(impl), tokens()
    rel, logn_train = REMAPS[spec]
    expected = reference_forward(model, ids, rel, logn_train)
    plain = reference_forward(model, ids, lambda i, j: i - j)
    torch.testing.assert_close(logits(tiny(impl), ids).double(), plain, atol=1e-4, rtol=0)  # reference ok
    assert (expected - plain).abs().max() > 1e-2                                         # and it differs
    extend(model, spec)
    torch.testing.assert_close(logits(model, ids).double(), expected, atol=1e-4, rtol=0)


# --- restore, generate, batches, dtypes ----------------------------------------------------------

@pytest.mark.parametrize("spec", ALL_METHODS)
def test_restore_gives_back_the_exact_model(spec):
    model, ids = tiny("sdpa"), tokens()
    base = logits(model, ids)
    extend(model, spec)
    assert extension_of(model) == spec
    assert not torch.equal(logits(model, ids), base)
    restore(model)
    assert extension_of(model) is None and model.config._attn_implementation == "sdpa"
    assert torch.equal(logits(model, ids), base)
    extend(model, spec)   # and it can be extended again
    restore(model)


def test_route_of_says_whether_the_model_keeps_its_attention():
    from lengen.hf.extensions import route_of

    model = tiny("sdpa")
    assert route_of(model) is None
    extend(model, "yarn:factor=4")  # a frequency method: a new rotary table, the model's own attention
    assert route_of(model) == "rotary" and model.config._attn_implementation == "sdpa"
    restore(model)
    extend(model, "rerope:window=8")  # a remapping method: lengen's attention replaces the model's
    assert route_of(model) == "attention" and model.config._attn_implementation != "sdpa"
    restore(model)
    assert route_of(model) is None


@torch.no_grad()
def check_generate_equals_full_forwards(model, prompt, new_tokens=12, attention_mask=None, atol=1e-4,
                                        tie=0.0):
    """Greedy generate() with the KV cache == greedy decoding by full forwards on the growing
    sequence: the logits agree within atol, and every generated token is the argmax of the full
    forward's logits. With tie > 0 (half precision, where rounding makes near-ties) a token whose
    logit is within `tie` of the maximum also counts as greedy, and decoding goes on from it."""
    mask = torch.ones_like(prompt) if attention_mask is None else attention_mask
    out = model.generate(prompt, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False,
                         pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    seq = prompt
    for step in range(new_tokens):
        positions = (mask.cumsum(-1) - 1).clamp(min=0)   # what generate() uses with padding
        full = model(seq, attention_mask=mask, position_ids=positions).logits[:, -1].float()
        torch.testing.assert_close(out.logits[step].float(), full, atol=atol, rtol=0)
        greedy = full.argmax(-1, keepdim=True)
        if tie > 0:
            chosen = out.sequences[:, seq.shape[1]:seq.shape[1] + 1]
            assert (full.gather(-1, chosen) >= full.max(-1, keepdim=True).values - tie).all(), step
            greedy = chosen
        seq = torch.cat([seq, greedy], 1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    assert torch.equal(out.sequences, seq)


EAGER_TOO = ["yarn:factor=4", "dynamic:factor=4", "rerope:window=8+logn", "sinks:window=12"]


@pytest.mark.parametrize("impl,spec", [("sdpa", s) for s in ALL_METHODS] + [("eager", s) for s in EAGER_TOO])
def test_generate_with_kv_cache_equals_full_forwards(spec, impl):
    # Dynamic NTK changes the frequencies of every layer with the length, so the cached keys
    # and values of layers >= 2 (computed from hidden states of a shorter sequence) cannot equal
    # a full forward's; with un-rotated caching it is exact for one layer, which is what we check.
    layers = 1 if spec.startswith("dynamic") else 2
    model = tiny(impl, num_hidden_layers=layers)
    extend(model, spec)
    # 28 prompt + 8 new tokens: decoding crosses the training length (32)
    check_generate_equals_full_forwards(model, tokens(length=28), new_tokens=8)


def check_left_padded_batch(model):
    """A batch whose second row is left-padded generates what that row alone generates, and
    cached generation equals full forwards on it."""
    ids = tokens(length=30)
    mask = torch.ones_like(ids)
    mask[1, :6] = 0
    batch = model.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=0)
    alone = model.generate(ids[1:, 6:], max_new_tokens=10, do_sample=False, pad_token_id=0)
    assert torch.equal(batch[1, 6:], alone[0])
    check_generate_equals_full_forwards(model, ids, new_tokens=4, attention_mask=mask)


@pytest.mark.parametrize("spec", ["dynamic:factor=4", "rerope:window=8+logn", "lambda:window=16"])
def test_left_padded_batch_matches_each_sequence_alone(spec):
    model = tiny("sdpa", num_hidden_layers=1 if spec.startswith("dynamic") else 2)
    extend(model, spec)
    check_left_padded_batch(model)


# Half precision. Unit roundoff u = 2^-(significand bits): bf16 keeps 8 bits, fp16 11. The tiny
# models' logits reach about |3| after one or two layers of norms, projections, softmax and MLP,
# each adding a few u of relative error; measured worst logit errors against fp32 are 2.5-5.5 u * max|logit| in
# every case here (bf16 0.033-0.060, fp16 0.0045-0.0082; transformers' own unextended model:
# 0.034-0.042 and 0.0056-0.0063). The bound below, 10 u * max|logit| = 0.11-0.13 (bf16) and
# 0.014-0.017 (fp16), leaves ~2x headroom and is 8x tighter for fp16 than for bf16, as the
# dtypes are.
UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def half_tolerance(dtype, reference):
    return 10 * UNIT_ROUNDOFF[dtype] * reference.abs().max().item()


def max_error(model, ids, reference):
    out = logits(model, ids)
    assert out.dtype == model.dtype
    return (out.float() - reference).abs().max().item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("spec", ["yarn:factor=4", "dynamic:factor=4", "rerope:window=8+logn"])
def test_half_precision_is_fp32_up_to_rounding(spec, dtype):
    layers = 1 if spec.startswith("dynamic") else 2   # for the generate() check (see above)
    ids = tokens()
    fp32 = tiny("sdpa", num_hidden_layers=layers)
    reference = logits(fp32, ids)
    hf_half_error = max_error(tiny("sdpa", num_hidden_layers=layers).to(dtype), ids, reference)
    extend(fp32, spec)
    reference = logits(fp32, ids)
    model = tiny("sdpa", num_hidden_layers=layers).to(dtype)
    extend(model, spec)
    error = max_error(model, ids, reference)
    assert error <= half_tolerance(dtype, reference), (error, half_tolerance(dtype, reference))
    # and no worse than twice what transformers' own model loses in this dtype (measured <= 1.45x)
    assert error <= 2 * hf_half_error, (error, hf_half_error)
    # greedy decoding with the cache, crossing the training length (28 + 8 > 32), equals greedy
    # decoding by full forwards in the same dtype, logits within the same rounding bound
    tol = half_tolerance(dtype, reference)
    check_generate_equals_full_forwards(model, ids[:, :28], new_tokens=8, atol=tol, tie=tol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("spec,length", [("rerope:window=64", 64), ("self_extend:window=64,group=4", 64),
                                         ("dynamic:factor=4", TRAIN)])
def test_half_precision_identity_methods_are_the_fp32_original(spec, length, dtype):
    """Methods that change nothing at this length (window >= length; dynamic NTK up to its training
    length) still run lengen's attention path in half precision: it must stay within rounding of
    transformers' own fp32 model, an independent reference."""
    ids = tokens(length=length)
    reference = logits(tiny("sdpa"), ids)
    model = tiny("sdpa").to(dtype)
    extend(model, spec)
    error = max_error(model, ids, reference)
    assert error <= half_tolerance(dtype, reference), (error, half_tolerance(dtype, reference))


@pytest.mark.parametrize("model_type", ["mistral", "phi3", "qwen2", "qwen3"])
def test_other_llama_layout_models(model_type):
    extra = {"sliding_window": None} if model_type == "mistral" else {}
    if model_type == "phi3":  # its defaults: a 2,047-token sliding window, pad id 32,000
        extra = {"sliding_window": None, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    model, ids = tiny("sdpa", model_type, **extra), tokens()
    base = logits(model, ids)
    extend(model, "rerope:window=64")
    torch.testing.assert_close(logits(model, ids), base, atol=1e-5, rtol=0)
    restore(model)
    extend(model, "self_extend:group=2,window=8+logn")
    check_generate_equals_full_forwards(model, tokens(length=30), new_tokens=4)
    restore(model)
    assert torch.equal(logits(model, ids), base)


# --- refusals ----------------------------------------------------------------------------------

def test_unsupported_architecture_fails_at_extend():
    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=50, n_positions=32))
    with pytest.raises(LengenError, match="model_type 'gpt2'"):
        extend(gpt2, "yarn", factor=4)


def test_bad_inputs_fail_at_extend_with_clear_messages():
    model = tiny()
    with pytest.raises(LengenError, match="no part of 'yarn' takes the option 'bogus'"):
        extend(model, "yarn", factor=4, bogus=1)
    with pytest.raises(LengenError, match="unknown option"):
        extend(model, "yarn:factor=4,bogus=1")
    with pytest.raises(LengenError, match="unknown extrapolation method"):
        extend(model, "nope")
    with pytest.raises(LengenError, match="takes the option"):
        extend(model, "rerope+logn", factor=2)
    with pytest.raises(LengenError, match="rope_type 'yarn'"):
        extend(tiny(rope_parameters={"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4}), "pi", factor=2)
    assert extension_of(model) is None   # nothing half-applied
    extend(model, "rerope", window=8)
    with pytest.raises(LengenError, match="already extended"):
        extend(model, "pi", factor=2)
    restore(model)
    with pytest.raises(LengenError, match="not extended"):
        restore(model)


def test_options_reach_the_right_part_and_train_length_defaults_from_config():
    model = tiny()
    extend(model, "rerope+logn", window=8)
    assert extension_of(model) == "rerope:window=8+logn"
    restore(model)
    extend(model, "yarn", factor=2, train_length=16)
    inv16 = model.model.rotary_emb.inv_freq.clone()
    restore(model)
    extend(model, "yarn", factor=2)   # default: max_position_embeddings = 32
    assert not torch.equal(model.model.rotary_emb.inv_freq, inv16)
