"""lengen.hf on the hybrid-layer families (Gemma 2/3, SmolLM3, Llama 4, OLMo 2/3, Granite,
Qwen3-MoE): tiny random models built with transformers' own config classes (tests/hf_families.py),
fp32, CPU. Layer kinds: sliding-window layers (Gemma, OLMo 3), NoPE layers (SmolLM3, Llama 4),
chunked layers (Llama 4), per-layer-type RoPE bases (Gemma 3)."""

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_families import FAMILIES, IMPLEMENTATIONS, TRAIN, WINDOW, tiny_family  # noqa: E402
from test_hf_extend import (  # noqa: E402
    check_generate_equals_full_forwards, check_left_padded_batch, logits, tokens)

from lengen.errors import LengenError  # noqa: E402
from lengen.hf import extend, restore  # noqa: E402
from lengen.hf.arch import inspect_model  # noqa: E402
from lengen.hf.extensions import route_of  # noqa: E402

CASES = [(name, impl) for name in FAMILIES for impl in IMPLEMENTATIONS[name]]
# one method per family for the per-pair reference and the cache check; Gemma 2's soft-capped
# logits exclude the remapping methods (they compute attention themselves), so PI there
METHOD = {name: "pi:factor=4" if name == "gemma2" else "rerope:window=8+logn" for name in FAMILIES}


# --- identity within the trained length, restore -------------------------------------------------

IDENTITY = ["dynamic:factor=4", "rerope:window=32", "self_extend:group=4,window=32+logn"]


@pytest.mark.parametrize("spec", IDENTITY)
@pytest.mark.parametrize("name,impl", CASES)
def test_identity_within_the_trained_length(name, impl, spec):
    """Up to L0 tokens these methods change nothing (log-n is 1 up to L0): logits equal the
    unmodified model's. Gemma 2 (soft-capping) is refused the remapping ones (tested below)."""
    if name == "gemma2" and spec != "dynamic:factor=4":
        pytest.skip("remapping methods are refused on soft-capped layers")
    model, ids = tiny_family(name, impl), tokens(length=TRAIN)
    base = logits(model, ids)
    extend(model, spec)
    assert route_of(model) == "attention"
    torch.testing.assert_close(logits(model, ids), base, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name,impl", CASES)
def test_restore_is_exact(name, impl):
    model, ids = tiny_family(name, impl), tokens()
    base = logits(model, ids)
    for spec in (METHOD[name], "yarn:factor=4"):
        extend(model, spec)
        assert not torch.equal(logits(model, ids), base)
        restore(model)
        assert torch.equal(logits(model, ids), base) and model.config._attn_implementation == impl


# --- KV cache --------------------------------------------------------------------------------

@pytest.mark.parametrize("name,impl", CASES)
def test_generate_with_kv_cache_equals_full_forwards(name, impl):
    """28 prompt + 8 new tokens: decoding crosses the training length (32) and the sliding
    window (8), whose cache layers then hold only their last keys."""
    model = tiny_family(name, impl)
    extend(model, METHOD[name])
    check_generate_equals_full_forwards(model, tokens(length=28), new_tokens=8)


# --- an independent per-pair reference, layer by layer --------------------------------------------

def layer_kinds(config) -> list[str]:
    """From the config alone: "nope", "sliding" or "rope" per layer."""
    kinds = []
    for i in range(config.num_hidden_layers):
        if getattr(config, "no_rope_layers", None) and not config.no_rope_layers[i]:
            kinds.append("nope")    # no_rope_layers: 1 = the layer uses RoPE (Llama 4, SmolLM3)
        elif (getattr(config, "layer_types", None) or ["full_attention"] * (i + 1))[i] == "sliding_attention":
            kinds.append("sliding")
        else:
            kinds.append("rope")
    return kinds


def layer_base(config, i: int) -> float:
    params = config.rope_parameters
    layer_type = (getattr(config, "layer_types", None) or [None] * (i + 1))[i]
    if layer_type in params and isinstance(params[layer_type], dict):   # Gemma 3, OLMo 3: per type
        return params[layer_type]["rope_theta"]
    return params["rope_theta"]


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def naive_layer(model, name, i, x, rel, logn):
    """Layer i's attention output, from its input x [B, T, hidden], in float64, with every (query
    p, key s) pair scored at relative position rel(p, s): q rotated by it, k unrotated. The
    projections and q/k norms are the model's own modules (not under test); rotation, masks,
    soft-capping, scaling, temperature and softmax are written out here."""
    config, a = model.config, model.model.layers[i].self_attn
    B, T, _ = x.shape
    H, Hk, d = config.num_attention_heads, config.num_key_value_heads, a.head_dim
    kind = layer_kinds(config)[i]
    with torch.no_grad():
        q, k, v = a.q_proj(x), a.k_proj(x), a.v_proj(x)
        if name in ("olmo2", "olmo3"):          # OLMo: norms over all heads, before the split
            q, k = a.q_norm(q), a.k_norm(k)
        q, k, v = (t.view(B, T, -1, d).transpose(1, 2) for t in (q, k, v))
        if name in ("gemma3", "qwen3_moe"):     # per-head norms
            q, k = a.q_norm(q), a.k_norm(k)
    q, k, v = q.double(), k.double(), v.double()
    if name == "llama4" and kind != "nope":     # L2 norm after RoPE: rotation-invariant, so first
        q, k = rms(q, config.rms_norm_eps), rms(k, config.rms_norm_eps)
    pos = torch.arange(T, dtype=torch.float64)
    if name == "llama4" and kind == "nope":     # attention-temperature tuning (Llama 4's own)
        q = q * (torch.log1p(torch.floor((pos + 1) / config.floor_scale)) * config.attn_scale + 1)[:, None]
    if logn and kind == "rope":
        q = q * (torch.log(pos + 1) / math.log(TRAIN)).clamp(min=1)[:, None]
    k, v = k.repeat_interleave(H // Hk, 1), v.repeat_interleave(H // Hk, 1)
    p, s = pos[:, None], pos[None, :]
    if kind == "nope":
        scores = torch.einsum("bhpd,bhsd->bhps", q, k)
    else:
        r = rel(p, s) if rel is not None and (kind == "rope" or rel.everywhere) else p - s
        inv_freq = 1.0 / (layer_base(config, i) ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        angle = r[..., None] * inv_freq                                     # [T, T, d/2]
        if name == "llama4":    # consecutive pairs as complex numbers: Re(q e^{i angle} conj(k))
            qc = torch.complex(q[..., 0::2], q[..., 1::2])
            kc = torch.complex(k[..., 0::2], k[..., 1::2])
            prod = qc[:, :, :, None] * kc[:, :, None].conj()
            scores = (prod * torch.polar(torch.ones_like(angle), angle)).real.sum(-1)
        else:                   # half-split: (R(r) q) . k per frequency
            q1, q2, k1, k2 = q[..., : d // 2], q[..., d // 2:], k[..., : d // 2], k[..., d // 2:]
            dot = torch.einsum("bhpf,bhsf->bhpsf", q1, k1) + torch.einsum("bhpf,bhsf->bhpsf", q2, k2)
            cross = torch.einsum("bhpf,bhsf->bhpsf", q1, k2) - torch.einsum("bhpf,bhsf->bhpsf", q2, k1)
            scores = (dot * angle.cos() + cross * angle.sin()).sum(-1)
    scores = scores * a.scaling
    cap = getattr(a, "attn_logit_softcapping", None)
    if cap:
        scores = torch.tanh(scores / cap) * cap
    visible = s <= p
    if kind == "sliding":
        visible = visible & (p - s < config.sliding_window)
    scores = scores.masked_fill(~visible, float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1)
    return out @ a.o_proj.weight.double().T


class Rel:
    """rel(p, s) for the pairs of the RoPE layers; `everywhere`: on sliding layers too."""

    def __init__(self, fn, everywhere):
        self.fn, self.everywhere = fn, everywhere

    def __call__(self, p, s):
        return self.fn(p, s)


# rerope's map is applied on sliding layers too: there every distance is < WINDOW = 8 = its
# window, so it must change nothing, and lengen (which leaves those layers alone) must agree
REFERENCE = {
    "rerope:window=8+logn": (Rel(lambda p, s: (p - s).clamp(max=8), everywhere=True), True),
    "pi:factor=4": (Rel(lambda p, s: (p - s) / 4, everywhere=False), False),
}


@torch.no_grad()
def layer_io(model, ids):
    """{layer: (input hidden states, attention output)} of one forward pass."""
    seen, handles = {}, []
    for layer in model.model.layers:
        attn = layer.self_attn

        def pre(module, args, kwargs):
            seen[module.layer_idx] = [kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]]

        def post(module, args, kwargs, out):
            seen[module.layer_idx].append(out[0])
        handles += [attn.register_forward_pre_hook(pre, with_kwargs=True),
                    attn.register_forward_hook(post, with_kwargs=True)]
    model(ids)
    for h in handles:
        h.remove()
    return seen


@pytest.mark.parametrize("name,impl", CASES)
def test_layers_match_a_naive_per_pair_reference(name, impl):
    model, ids = tiny_family(name, impl), tokens(length=64)
    spec = METHOD[name]
    rel, logn = REFERENCE[spec]
    for i, (x, out) in layer_io(model, ids).items():   # the reference itself, on the model as is
        torch.testing.assert_close(out.double(), naive_layer(model, name, i, x, None, False),
                                   atol=1e-4, rtol=0)
    extend(model, spec)
    changed = 0
    for i, (x, out) in layer_io(model, ids).items():
        expected = naive_layer(model, name, i, x, rel, logn)
        changed += (expected - naive_layer(model, name, i, x, None, False)).abs().max() > 1e-3
        torch.testing.assert_close(out.double(), expected, atol=1e-4, rtol=0)
    assert changed >= 1                   # the method matters in some layer
    kinds = layer_kinds(model.config)
    assert "rope" in kinds and len(set(kinds)) > 1 or name in ("olmo2", "granite", "qwen3_moe")


# --- layer kinds -------------------------------------------------------------------------------

def hf_reference(name, impl, **extra):
    """A model with transformers' own per-layer-type rope_parameters (5.0's validation of a
    per-layer-type yarn config reads a top-level key and fails: skipped there)."""
    try:
        return tiny_family(name, impl, **extra)
    except KeyError as e:
        pytest.skip(f"transformers {transformers.__version__} cannot build this config ({e})")


def test_sliding_layers_keep_their_window_and_own_rope():
    """Gemma 3 with yarn: the global layers get yarn from their own base (1M), the sliding layers
    (window 8 < L0) keep plain RoPE at theirs (10k): transformers' own per-layer-type
    rope_parameters computing the same, the rotary route (the model's attention kept)."""
    ids = tokens()
    model = tiny_family("gemma3", "sdpa")
    extend(model, "yarn:factor=4")
    assert route_of(model) == "rotary"
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": TRAIN}
    reference = hf_reference("gemma3", "sdpa", rope_parameters={
        "full_attention": {**yarn, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    reference.load_state_dict(model.state_dict())
    torch.testing.assert_close(logits(model, ids), logits(reference, ids), atol=1e-5, rtol=0)


@pytest.mark.parametrize("spec", ["yarn:factor=4", "dynamic:factor=4"])
def test_each_layer_type_is_scaled_from_its_own_base(spec):
    """A sliding window (48) beyond L0 (32): those layers get the method too, from their own
    base (10k; the global layers from 1M), against transformers' per-layer-type parameters
    (dynamic: at 64 tokens, a full forward, where transformers' own dynamic is exact)."""
    ids = tokens()
    model = tiny_family("gemma3", "eager", sliding_window=48)
    extend(model, spec)
    name = spec.split(":")[0]
    params = {"rope_type": name, "factor": 4.0}
    if name == "yarn":
        params["original_max_position_embeddings"] = TRAIN
    reference = hf_reference("gemma3", "eager", sliding_window=48, rope_parameters={
        "full_attention": {**params, "rope_theta": 1e6}, "sliding_attention": {**params, "rope_theta": 1e4}})
    reference.load_state_dict(model.state_dict())
    wrong = hf_reference("gemma3", "eager", sliding_window=48, rope_parameters={  # one base for both
        "full_attention": {**params, "rope_theta": 1e6}, "sliding_attention": {**params, "rope_theta": 1e6}})
    wrong.load_state_dict(model.state_dict())
    theirs = logits(reference, ids)
    assert (theirs - logits(wrong, ids)).abs().max() > 1e-3
    torch.testing.assert_close(logits(model, ids), theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("window,extended", [(TRAIN - 1, False), (TRAIN, False), (TRAIN + 1, True)])
def test_a_sliding_window_is_extended_only_past_the_trained_length(window, extended):
    """The boundary of Layer.extended: a window of L0 keys (distances up to L0 - 1, all trained)
    keeps the layer's own RoPE, as one below it does; one more key and the method applies there.
    Gemma 3 with yarn against transformers' per-layer-type rope_parameters, and a remapping
    method refused exactly where the sliding layers are extended."""
    ids = tokens()
    model = tiny_family("gemma3", "eager", sliding_window=window)
    assert [layer.extended(TRAIN) for layer in inspect_model(model).layers] == [extended, True] * 2
    extend(model, "yarn:factor=4")
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": TRAIN}
    sliding = {**yarn, "rope_theta": 1e4} if extended else {"rope_type": "default", "rope_theta": 1e4}
    reference = hf_reference("gemma3", "eager", sliding_window=window, rope_parameters={
        "full_attention": {**yarn, "rope_theta": 1e6}, "sliding_attention": sliding})
    reference.load_state_dict(model.state_dict())
    torch.testing.assert_close(logits(model, ids), logits(reference, ids), atol=1e-5, rtol=0)
    restore(model)
    if extended:
        with pytest.raises(LengenError, match=f"sliding layer whose window \\({window}\\) exceeds"):
            extend(model, "rerope:window=8")
    else:
        extend(model, "rerope:window=8")
        restore(model)


def test_llama4_chunked_rope_layers_within_the_trained_length_are_kept():
    """Llama 4's RoPE layers attend within chunks (8 < L0 = 32) and its NoPE layer has no
    positions: no layer takes a method, so the model is its own at twice L0."""
    model, ids = tiny_family("llama4", "sdpa", attention_chunk_size=WINDOW,
                             layer_types=["chunked_attention"] * 3 + ["full_attention"]), tokens()
    assert [layer.kind for layer in inspect_model(model).layers] == ["chunked"] * 3 + ["nope"]
    base = logits(model, ids)
    extend(model, "rerope:window=4+logn")
    torch.testing.assert_close(logits(model, ids), base, atol=1e-5, rtol=0)
    check_generate_equals_full_forwards(model, tokens(length=28), new_tokens=8)
    restore(model)


def test_nope_layers_keep_no_positions():
    """SmolLM3's NoPE layer (layer 3) under rerope+logn: its output, from its input, is attention
    without positions and without log-n (not applied there), as in the unmodified model."""
    model, ids = tiny_family("smollm3", "sdpa"), tokens()
    before = layer_io(model, ids)
    extend(model, "rerope:window=8+logn")
    after = layer_io(model, ids)
    x = after[3][0]
    torch.testing.assert_close(after[3][1].double(), naive_layer(model, "smollm3", 3, x, None, False),
                               atol=1e-4, rtol=0)
    assert not torch.allclose(after[2][1], before[2][1], atol=1e-3)   # a RoPE layer did change


def test_refusals_name_the_layer_and_the_reason():
    with pytest.raises(LengenError, match="soft-caps its attention logits"):
        extend(tiny_family("gemma2"), "rerope:window=8")
    with pytest.raises(LengenError, match="sliding layer whose window"):
        extend(tiny_family("gemma3", sliding_window=48), "rerope:window=8")


# --- lengen hf methods -----------------------------------------------------------------------------

def table_rows(text: str) -> dict[int, str]:
    """{layer: its 'methods' cell} from the printed table."""
    rows = {}
    for line in text.splitlines():
        cells = line.split(None, 5)
        if len(cells) == 6 and cells[0].isdigit():
            rows[int(cells[0])] = cells[5]
    return rows


def test_methods_command_says_which_methods_apply_where(tmp_path, capsys):
    from lengen.cli import main

    tiny_family("gemma2").config.save_pretrained(tmp_path / "gemma2")   # a config is all it reads
    assert main(["hf", "methods", str(tmp_path / "gemma2")]) == 0
    rows = table_rows(capsys.readouterr().out)
    assert rows[0] == rows[2] == "none (sliding window 8 <= L0)"
    assert rows[1] == rows[3] == "frequency, log-n; remapping refused (soft-capping)"
    tiny_family("smollm3").config.save_pretrained(tmp_path / "smollm3")
    assert main(["hf", "methods", str(tmp_path / "smollm3")]) == 0
    out = capsys.readouterr().out
    assert table_rows(out) == {0: "all", 1: "all", 2: "all", 3: "none (NoPE)"}
    assert "remapping (rerope, leaky_rerope, self_extend, lambda, sinks, dca, string, dpe, dope): layers 0, 1, 2" in out
    # a sliding window beyond --train-length: frequency methods apply there, remapping is refused
    tiny_family("gemma3").config.save_pretrained(tmp_path / "gemma3")
    assert main(["hf", "methods", str(tmp_path / "gemma3"), "--train-length", "4"]) == 0
    out = capsys.readouterr().out
    assert table_rows(out)[0] == "frequency, log-n; remapping refused (window 8 > L0)"
    assert "sliding  8       10000" in out and "rope     -       1e+06" in out   # each layer's base


def test_methods_command_lists_and_refuses_bad_input(tmp_path, capsys):
    from lengen.cli import main

    assert main(["hf", "methods", "--list"]) == 0
    out = capsys.readouterr().out
    assert "gemma2" in out and "llama4_text" in out and "frequency methods: pi, ntk" in out
    for argv, message in [([], "give a MODEL or --list"), (["gemma3", "--list"], "give a MODEL or --list"),
                          (["no-such-model-type"], "not a readable model folder"),
                          (["gpt2"], "does not support model_type 'gpt2'"),
                          (["llama", "--train-length", "0"], "--train-length must be >= 2"),
                          (["llama", "--train-length", "1"], "--train-length must be >= 2"),
                          ([str(tmp_path), "--gguf-file", "m.gguf"], "--gguf-file 'm.gguf' is not a file"),
                          (["--list", "--gguf-file", "m.gguf"], "--gguf-file goes with a MODEL folder")]:
        assert main(["hf", "methods", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", list(FAMILIES))
def test_both_routes_agree(name):
    """yarn alone runs on the rotary route where the model allows it; with a log-n part that is 1
    at every position here (its own train_length 10^5) it runs on lengen's attention route: the
    logits agree (Llama 4: its L2 q/k norm cancels yarn's attention factor on both)."""
    model, ids = tiny_family(name, IMPLEMENTATIONS[name][-1]), tokens()
    extend(model, "yarn:factor=4")
    rotary = logits(model, ids)
    restore(model)
    extend(model, "yarn:factor=4+logn:train_length=100000")
    assert route_of(model) == "attention"
    # 1e-4: float32 rounding of rotating before / after the norm (measured 2e-5 on Llama 4; the
    # factor left in gave 1.9)
    torch.testing.assert_close(logits(model, ids), rotary, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name,spec", [("gemma3", "rerope:window=8+logn"), ("gemma2", "dynamic:factor=2"),
                                       ("smollm3", "self_extend:group=2,window=8")])
def test_left_padded_batch_matches_each_sequence_alone(name, spec):
    """Padding with sliding-window cache layers (their keys: the last recorded positions)."""
    model = tiny_family(name, "eager", **({"num_hidden_layers": 2} if "dynamic" in spec else {}))
    extend(model, spec)
    check_left_padded_batch(model)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["gemma3", "smollm3", "llama4"])
def test_half_precision_is_fp32_up_to_rounding(name, dtype):
    """bf16 / fp16 weights: the extended model's logits within what transformers' own
    unextended model loses in that dtype (twice it), against the extended fp32 model. Llama 4
    with one expert: with two, a rounding difference flips the top-1 router at a few tokens
    (measured: max error 0.73 at 0.1% of the logits, mean error as transformers' own), which
    says nothing about positions."""
    ids = tokens()
    extra = {"num_local_experts": 1} if name == "llama4" else {}
    hf_error = (logits(tiny_family(name, "sdpa", **extra).to(dtype), ids).float()
                - logits(tiny_family(name, "sdpa", **extra), ids)).abs().max().item()
    fp32 = tiny_family(name, "sdpa", **extra)
    extend(fp32, METHOD[name])
    model = tiny_family(name, "sdpa", **extra).to(dtype)
    extend(model, METHOD[name])
    out = logits(model, ids)
    assert out.dtype == dtype
    error = (out.float() - logits(fp32, ids)).abs().max().item()
    assert error <= 2 * hf_error, (error, hf_error)


@pytest.mark.parametrize("name,extra", [(name, {}) for name in FAMILIES]
                         + [("gemma3", {"final_logit_softcapping": 30.0})])
def test_evaluation_nll_is_the_models_own_output(name, extra):
    """`lengen hf eval` runs the decoder and the output head itself (the head in chunks), so it
    must apply what each family's forward does after the head: Gemma's final-logit soft-capping
    (Gemma 2: 30 by default), Granite's logits_scaling. Reference: the cross-entropy of the
    model's own forward logits."""
    from lengen.hf.scoring import nll_fn
    from lengen.protocols import nll_from_logits

    model, ids = tiny_family(name, IMPLEMENTATIONS[name][-1], **extra), tokens()
    with torch.no_grad():
        reference = nll_from_logits(lambda x: model(x).logits)(ids, 20)
    torch.testing.assert_close(nll_fn(model, chunk=7)(ids, 20).double(), reference.double(), atol=1e-5, rtol=1e-5)
