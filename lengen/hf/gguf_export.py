"""`lengen hf export --format gguf`: one GGUF file that llama.cpp runs with the method built in.

llama.cpp reads a method from the file's own keys: `{arch}.rope.freq_base` (NTK), the
`{arch}.rope.scaling.*` keys (linear = PI, YaRN) or a `rope_freqs` tensor of per-pair frequency
divisors (Llama 3); Self-Extend is a `llama-completion` flag, so its file is the unchanged model.
Written for llama.cpp's `llama` architecture (Llama and Mistral layouts), in f32 or f16, with the
tokenizer carried over from a GGUF source or written from a byte-level BPE tokenizer.json.

The check, as for the transformers folder: a fresh interpreter without lengen loads the file with
llama-cpp-python (f32 KV cache, no flash attention) and its logits on a sequence past the trained
length are compared with `lengen.hf.extend`'s on the source model. Without llama-cpp-python the
file is written and the record says it is unchecked, and why.

Key names, tensor names and the Q/K row permutation follow llama.cpp's gguf-py constants and
converter (read, not copied); what llama.cpp computes from them, in its source (llama-context.cpp,
ggml-cpu rope): the YaRN attention factor there is (0.1 ln s + 1) x `rope.scaling.attn_factor`,
and the llama architecture reads no YaRN beta or ext-factor key (beta_fast 32, beta_slow 1).
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from lengen import __version__, io
from lengen.encodings.rope import default_inv_freq
from lengen.environment import git_commit
from lengen.errors import LengenError
from lengen.extrapolation import parse_spec
from lengen.extrapolation.yarn import yarn_mscale
from lengen.hf import exporting as ex
from lengen.hf.arch import inspect_model
from lengen.hf.methods import build

try:   # the gguf extra; without it the export refuses, saying how to install it
    import gguf
except ImportError:
    gguf = None

ENGINE = "llama.cpp"
#: the spec names the writer writes ("rope": the model unchanged, a plain conversion)
METHODS = ("rope", "pi", "ntk", "yarn", "llama3", "self_extend")
#: model_type -> llama.cpp architecture (its converter writes Mistral's layout as llama too)
FAMILIES = {"llama": "llama", "mistral": "llama"}
TYPES = ("f32", "f16")
#: the check's bound on max |llama.cpp - lengen.hf.extend| over max(1, max |logit|). f32 runs the
#: same arithmetic in another order: 2e-6 to 6e-6 on the tiny test model at 133 tokens; the float32
#: rotary angles' rounding grows with the position (SmolLM2: 2e-5 at 2,048 tokens, plain RoPE;
#: 1.7e-4 at 10,240, YaRN x4). f16 rounds weights and activations to 11 bits (7e-3 on the tiny model)
TOLERANCE = {"f32": 1e-3, "f16": 2e-2}
WHAT = ("logits of the GGUF file in llama-cpp-python (f32 KV cache, no flash attention) in a fresh "
        "interpreter without lengen, against lengen.hf.extend on the source model in float32")


@dataclass
class GgufRope:
    """The rope keys (and Llama 3's tensor) a method becomes in a llama-architecture GGUF."""

    freq_base: float
    scaling: str = "none"                 # {arch}.rope.scaling.type: none | linear | yarn
    factor: float | None = None
    original_context: int | None = None   # YaRN's L0
    attn_factor: float | None = None      # multiplies llama.cpp's own YaRN mscale
    rope_freqs: list[float] | None = None  # Llama 3: per-pair divisors of the frequencies

    def keys(self, arch: str) -> dict:
        keys = {f"{arch}.rope.freq_base": self.freq_base, f"{arch}.rope.scaling.type": self.scaling}
        if self.factor is not None:
            keys[f"{arch}.rope.scaling.factor"] = self.factor
        if self.original_context is not None:
            keys[f"{arch}.rope.scaling.original_context_length"] = self.original_context
        if self.attn_factor is not None:
            keys[f"{arch}.rope.scaling.attn_factor"] = self.attn_factor
        return keys


@dataclass
class Plan:
    method: object
    spec: str
    L0: int
    context: int                          # {arch}.context_length
    rope: GgufRope
    command: str | None = None            # self_extend: the llama.cpp command line
    notes: list[str] = field(default_factory=list)


def refusal(name: str) -> str:
    """Why --format gguf does not write `name`, and what it writes."""
    engines = ex.SUPPORT.get(name, {})
    writes = ", ".join(METHODS)
    if name == "longrope":
        why = ("llama.cpp runs longrope with Phi-3's rope_factors tensors, which lengen's GGUF writer "
               "(llama architecture) does not write")
    elif engines:
        why = f"{name} runs natively in {', '.join(engines)}, not in llama.cpp"
    else:
        why = f"no engine implements {name} natively"
    return f"{why}; --format gguf writes: {writes}"


def check_spec(spec: str) -> None:
    """Refuse a spec the GGUF export cannot hold (before any model is loaded), or any spec when
    the gguf package is missing."""
    if gguf is None:
        raise LengenError("lengen hf export --format gguf: the gguf package is not installed "
                          "(pip install 'lengen[gguf]')")
    parts = parse_spec(spec)
    for name, _ in parts:
        if name not in METHODS:
            raise LengenError(f"lengen hf export --format gguf: {spec!r}: " + refusal(name))
    if len(parts) != 1:
        raise LengenError(f"lengen hf export --format gguf: {spec!r} combines "
                          f"{' + '.join(name for name, _ in parts)}; a GGUF holds one rope scaling")
    name, opts = parts[0]
    if name == "yarn":
        _check_yarn(float(opts.get("beta_fast") or 32), float(opts.get("beta_slow") or 1),
                    bool(opts.get("truncate", True)))
    if name == "self_extend" and "group" in opts and "window" in opts:
        _check_groups(int(opts["group"]), int(opts["window"]))


def _check_groups(G: int, W: int) -> None:
    if W % G:
        raise LengenError(f"lengen hf export --format gguf: self_extend window {W} is not a multiple of "
                          f"its group {G}, which llama-completion's --grp-attn-w requires")


def check_source(config, tokenizer, source: dict) -> None:
    """The refusals that need only the config and the tokenizer (the CLI: before the model loads)."""
    _check_family(config)
    vocab_keys(tokenizer, source, int(config.vocab_size))


def _check_yarn(beta_fast: float, beta_slow: float, truncate: bool) -> None:
    if (beta_fast, beta_slow, truncate) != (32.0, 1.0, True):
        raise LengenError("lengen hf export --format gguf: llama.cpp's llama architecture runs YaRN with "
                          "beta_fast 32, beta_slow 1 and rounded ramp ends (it reads no GGUF key for them): "
                          f"not beta_fast {beta_fast:g}, beta_slow {beta_slow:g}, truncate {truncate}")


def check_type(gguf_type: str) -> None:
    if gguf_type not in TYPES:
        raise LengenError(f"lengen hf export: --gguf-type {gguf_type!r}: choose {' or '.join(TYPES)}")


def _check_family(config) -> str:
    """llama.cpp's architecture name for a model of `config`, or a LengenError naming what is written."""
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        raise LengenError(f"lengen hf export --format gguf: model_type {model_type!r} is not written as GGUF "
                          f"by lengen; supported: {', '.join(FAMILIES)} (llama.cpp's llama architecture)")
    # llama.cpp's llama graph has none of these: the file would run another model
    if getattr(config, "sliding_window", None):
        raise LengenError(f"lengen hf export --format gguf: this {model_type} model has a sliding window "
                          f"({config.sliding_window}); llama.cpp's llama architecture attends to all tokens")
    for flag in ("attention_bias", "mlp_bias"):
        if getattr(config, flag, False):
            raise LengenError(f"lengen hf export --format gguf: {flag} is set; lengen's GGUF writer "
                              "writes the bias-free Llama layout only")
    if getattr(config, "hidden_act", "silu") != "silu":
        raise LengenError(f"lengen hf export --format gguf: hidden_act {config.hidden_act!r}; llama.cpp's llama "
                          "architecture runs SiLU")
    return FAMILIES[model_type]


def _rope(method, L0: int) -> GgufRope:
    """The GGUF rope keys that make llama.cpp compute `method`'s frequencies and attention factor."""
    name, base = method.name, float(method.rope.base)
    if name in ("rope", "self_extend"):
        return GgufRope(freq_base=base)
    if name == "pi":
        return GgufRope(freq_base=base, scaling="linear", factor=float(method.factor))
    if name == "ntk":
        d = method.rope.rotary_dim
        return GgufRope(freq_base=float(base * method.factor ** (d / (d - 2))))
    if name == "yarn":
        _check_yarn(method.beta_fast, method.beta_slow, method.truncate)
        # llama.cpp's YaRN scales q and k by (0.1 ln s + 1) times this key
        attn = float(method.attention_factor) / yarn_mscale(float(method.factor))
        return GgufRope(freq_base=base, scaling="yarn", factor=float(method.factor), original_context=L0,
                        attn_factor=None if abs(attn - 1.0) < 1e-7 else attn)
    if name == "llama3":
        # llama.cpp divides each pair's frequency by rope_freqs: the method's as divisors of the plain ones
        inv_freq, _ = method.rope_params(L0)
        plain = default_inv_freq(method.rope.rotary_dim, base)
        return GgufRope(freq_base=base, rope_freqs=[float(x) for x in (plain / inv_freq.cpu())])
    raise LengenError(f"lengen hf export --format gguf: {name}: " + refusal(name))


def plan(model, spec: str, options: dict, train_length: int | None, length: int | None) -> Plan:
    """What the GGUF holds for `model` and `spec`, or a LengenError saying why it cannot."""
    check_spec(spec)
    _check_family(model.config)
    parts = inspect_model(model, require_attention=False)
    if parts.required_method or parts.config_methods:
        raise LengenError("lengen hf export: the model's config already asks for a method "
                          f"({', '.join(parts.config_methods) or parts.required_method}); export starts "
                          "from plain RoPE")
    L0 = int(train_length or parts.original_length or parts.max_positions)
    try:
        method, spec = build(spec, options, parts.head_dim, parts.tables[""].base, L0)
    except ValueError as e:
        raise LengenError(f"lengen hf export: {spec!r}: {e}") from None
    rope = _rope(method, L0)
    if method.name == "self_extend":
        G, W = method.group, method.window
        _check_groups(G, W)
        context = int(length or (L0 - W) * G + W)   # Self-Extend's reach
        return Plan(method, spec, L0, L0, rope,
                    command=f"llama-completion -m FILE -c {context} --grp-attn-n {G} --grp-attn-w {W}")
    context = L0 if method.name == "rope" else ex._target_length(method, length)
    return Plan(method, spec, L0, context, rope)


# -- the tokenizer ------------------------------------------------------------------------------

TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5   # llama.cpp's token types


def _gguf_source_vocab(path: Path) -> tuple[list, str]:
    """Every tokenizer.* key of a GGUF file, with its GGUF types: (key, value, type, item type)."""
    reader = gguf.GGUFReader(str(path))
    keys = []
    for key, f in reader.fields.items():
        if key.startswith("tokenizer."):
            array = f.types[0] == gguf.GGUFValueType.ARRAY
            keys.append((key, f.contents(), f.types[0], f.types[-1] if array else None))
    if not keys:
        raise LengenError(f"lengen hf export --format gguf: {path.name} holds no tokenizer keys to carry over")
    return keys, f"carried over from {path.name}"


def _byte_level(part) -> bool:
    if isinstance(part, dict):
        return part.get("type") == "ByteLevel" or any(_byte_level(p) for p in part.get("pretokenizers", []))
    return False


def _pre_tokenizer(pre) -> str:
    """llama.cpp's name for the split a tokenizer.json pre_tokenizer makes: the two lengen can tell
    from its structure (GPT-2's regex; SmolLM's, single digits first), else llama.cpp's 'default'."""
    def gpt2(p):
        return isinstance(p, dict) and p.get("type") == "ByteLevel" and p.get("use_regex", True)
    if gpt2(pre):
        return "gpt-2"
    steps = pre.get("pretokenizers", []) if isinstance(pre, dict) and pre.get("type") == "Sequence" else []
    if len(steps) == 2 and steps[0].get("type") == "Digits" and steps[0].get("individual_digits") and gpt2(steps[1]):
        return "smollm"
    return "default"


def _hf_vocab(tokenizer, vocab_size: int) -> tuple[list, str]:
    """llama.cpp's gpt2 (byte-level BPE) tokenizer keys from a transformers fast tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    data = json.loads(backend.to_str()) if backend is not None else {}
    model = data.get("model", {})
    if model.get("type") != "BPE" or not _byte_level(data.get("pre_tokenizer")):
        kind = f"{model.get('type')} model" if model else f"{type(tokenizer).__name__} (no tokenizer.json)"
        raise LengenError(f"lengen hf export --format gguf: the tokenizer is a {kind}; lengen writes llama.cpp's "
                          "byte-level BPE (gpt2) tokenizers, or carries a GGUF source's (--gguf-file)")
    ids = dict(model["vocab"])
    added = {t["id"]: t for t in data.get("added_tokens", [])}
    for i, t in added.items():
        ids[t["content"]] = i
    n = max(ids.values()) + 1
    if n > vocab_size:
        raise LengenError(f"lengen hf export --format gguf: the tokenizer has {n} tokens, the model's "
                          f"embedding {vocab_size} rows")
    tokens, types = [f"[PAD{i}]" for i in range(vocab_size)], [TOKEN_UNUSED] * vocab_size
    for text, i in ids.items():
        tokens[i] = text
        types[i] = TOKEN_NORMAL if i not in added else (
            TOKEN_CONTROL if added[i].get("special") else TOKEN_USER_DEFINED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    T = gguf.GGUFValueType
    pre = _pre_tokenizer(data.get("pre_tokenizer"))
    keys = [("tokenizer.ggml.model", "gpt2", T.STRING, None),
            ("tokenizer.ggml.pre", pre, T.STRING, None),
            ("tokenizer.ggml.tokens", tokens, T.ARRAY, T.STRING),
            ("tokenizer.ggml.token_type", types, T.ARRAY, T.INT32)]
    if merges:
        keys.append(("tokenizer.ggml.merges", merges, T.ARRAY, T.STRING))
    for key, attr in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unknown", "unk_token_id"),
                      ("padding", "pad_token_id")):
        if (i := getattr(tokenizer, attr, None)) is not None:
            keys.append((f"tokenizer.ggml.{key}_token_id", int(i), T.UINT32, None))
    bos = getattr(tokenizer, "bos_token_id", None)
    first = tokenizer("a", add_special_tokens=True)["input_ids"][:1]
    keys.append(("tokenizer.ggml.add_bos_token", bos is not None and first == [bos], T.BOOL, None))
    if isinstance(getattr(tokenizer, "chat_template", None), str):
        keys.append(("tokenizer.chat_template", tokenizer.chat_template, T.STRING, None))
    # llama.cpp knows pre-tokenizers by name only: with 'default' (one lengen could not name),
    # text may split otherwise than in transformers; the token ids mean the same model either way
    return keys, f"byte-level BPE from tokenizer.json, llama.cpp pre-tokenizer {pre!r}" + (
        " (not identified: text may tokenize otherwise than in transformers)" if pre == "default" else "")


def vocab_keys(tokenizer, source: dict, vocab_size: int) -> tuple[list, str]:
    """(tokenizer keys, where they came from): a GGUF source's own, else the HF tokenizer's, else
    llama.cpp's 'none' vocabulary (token ids only)."""
    if source.get("gguf_file") and source.get("path"):
        return _gguf_source_vocab(Path(source["path"]) / source["gguf_file"])
    if tokenizer is not None:
        return _hf_vocab(tokenizer, vocab_size)
    return [("tokenizer.ggml.model", "none", gguf.GGUFValueType.STRING, None)], \
        "none (no tokenizer given: llama.cpp runs token ids only)"


# -- the file -----------------------------------------------------------------------------------

def _permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """transformers rotates the two halves of a head, llama.cpp adjacent pairs: reorder the rows
    of q_proj / k_proj so that llama.cpp's pair i is transformers' (i, i + d/2)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tensors(model, gguf_type: str):
    """(GGUF name, numpy array) for every weight of a Llama-layout model."""
    config = model.config
    T = gguf.MODEL_TENSOR
    per_layer = {"input_layernorm": T.ATTN_NORM, "self_attn.q_proj": T.ATTN_Q, "self_attn.k_proj": T.ATTN_K,
                 "self_attn.v_proj": T.ATTN_V, "self_attn.o_proj": T.ATTN_OUT,
                 "post_attention_layernorm": T.FFN_NORM, "mlp.gate_proj": T.FFN_GATE, "mlp.up_proj": T.FFN_UP,
                 "mlp.down_proj": T.FFN_DOWN}
    top = {"model.embed_tokens": T.TOKEN_EMBD, "model.norm": T.OUTPUT_NORM, "lm_head": T.OUTPUT}
    n_head, n_kv = config.num_attention_heads, config.num_key_value_heads or config.num_attention_heads
    tied = model.get_output_embeddings() is not None and \
        model.get_output_embeddings().weight is model.get_input_embeddings().weight
    for hf_name, w in model.state_dict().items():
        stem = hf_name.removesuffix(".weight")
        if stem == "lm_head" and tied:
            continue   # llama.cpp reads token_embd when output is absent
        parts = stem.split(".")
        if stem in top:
            kind, bid = top[stem], None
        elif parts[:2] == ["model", "layers"] and ".".join(parts[3:]) in per_layer and hf_name.endswith(".weight"):
            kind, bid = per_layer[".".join(parts[3:])], int(parts[2])
        else:
            raise LengenError(f"lengen hf export --format gguf: {hf_name} is not a tensor of the Llama layout "
                              "lengen's GGUF writer knows")
        w = w.detach().float().cpu()
        if kind == T.ATTN_Q:
            w = _permute(w, n_head)
        elif kind == T.ATTN_K:
            w = _permute(w, n_kv)
        name = gguf.TENSOR_NAMES[kind].format(bid=bid) + ".weight"
        # norms stay f32, as llama.cpp's own converter keeps 1-D tensors
        array = w.numpy().astype(np.float16 if gguf_type == "f16" and w.ndim > 1 else np.float32)
        yield name, array


def write(path: Path, model, p: Plan, vocab: list, gguf_type: str) -> None:
    """The GGUF file: llama architecture keys, the method's rope keys, the tokenizer, the weights."""
    config, arch = model.config, FAMILIES[model.config.model_type]
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(str(getattr(config, "name_or_path", "") or "lengen export").split("/")[-1] or "lengen export")
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if gguf_type == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    w.add_vocab_size(int(config.vocab_size))
    w.add_context_length(int(p.context))
    w.add_embedding_length(int(config.hidden_size))
    w.add_block_count(int(config.num_hidden_layers))
    w.add_feed_forward_length(int(config.intermediate_size))
    w.add_head_count(int(config.num_attention_heads))
    w.add_head_count_kv(int(config.num_key_value_heads or config.num_attention_heads))
    w.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    if head_dim != config.hidden_size // config.num_attention_heads:
        w.add_key_length(int(head_dim))
        w.add_value_length(int(head_dim))
    w.add_rope_dimension_count(int(head_dim))
    r = p.rope
    w.add_rope_freq_base(r.freq_base)
    w.add_rope_scaling_type(gguf.RopeScalingType(r.scaling))
    if r.factor is not None:
        w.add_rope_scaling_factor(r.factor)
    if r.original_context is not None:
        w.add_rope_scaling_orig_ctx_len(r.original_context)
    if r.attn_factor is not None:
        w.add_rope_scaling_attn_factors(r.attn_factor)
    for key, value, vtype, sub in vocab:
        w.add_key_value(key, value, vtype, sub_type=sub)
    for name, array in _tensors(model, gguf_type):
        w.add_tensor(name, array)
    if r.rope_freqs is not None:
        w.add_tensor(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight",
                     np.asarray(r.rope_freqs, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# -- the check ----------------------------------------------------------------------------------

#: run in a fresh interpreter: lengen made unimportable, the GGUF loaded by llama-cpp-python
_CHECK = r"""
import json, sys
sys.modules["lengen"] = None
import numpy as np, llama_cpp
path, ids_path, out_path, threads = sys.argv[1:5]
ids = np.load(ids_path).tolist()
llm = llama_cpp.Llama(model_path=path, n_ctx=len(ids), logits_all=True, n_threads=int(threads),
                      type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, flash_attn=False,
                      verbose=False)
llm.eval(ids)
np.save(out_path, np.asarray(llm.scores[:len(ids)], dtype=np.float32))
print(json.dumps({"llama_cpp_python": llama_cpp.__version__}))
"""


def llama_cpp_missing() -> str | None:
    """Why llama-cpp-python cannot check the file here, or None."""
    if importlib.util.find_spec("llama_cpp") is None:
        return ("llama-cpp-python is not importable here (bash scripts/llama_cpp_wheel.sh installs it into "
                ".venv, or pip install llama-cpp-python)")
    return None


def llama_cpp_logits(path: Path, ids: torch.Tensor, work: Path) -> tuple[np.ndarray, dict]:
    """(logits [n, vocab] as a memory-mapped array, versions) of the GGUF on `ids` [1, n]."""
    ids_path, out_path = work / "ids.npy", work / "logits.npy"
    np.save(ids_path, ids[0].cpu().numpy().astype(np.int64))
    versions = ex.run_without_lengen(_CHECK, [path, ids_path, out_path, max(1, torch.get_num_threads())], work,
                                     "llama.cpp does not run the GGUF file")
    return np.load(out_path, mmap_mode="r"), versions


def _max_diff(got: np.ndarray, expected: torch.Tensor) -> tuple[float, float]:
    """(max |got - expected|, max |expected|), a block of rows at a time (long checks are GBs)."""
    diff = scale = 0.0
    for start in range(0, expected.shape[0], 1024):
        e = expected[start:start + 1024]
        g = torch.from_numpy(np.array(got[start:start + 1024], dtype=np.float32))
        diff = max(diff, float((g - e).abs().max()))
        scale = max(scale, float(e.abs().max()))
    return diff, scale


# -- the export ---------------------------------------------------------------------------------

def check_out(out: Path, spec: str, fingerprint: str | None, gguf_type: str) -> bool:
    """True when `out` already holds this GGUF export (nothing to do); refuse any other folder."""
    if not ex.check_out(out, spec, fingerprint, engine=ENGINE):
        return False
    earlier = io.read_json(out / ex.RECORD)
    if earlier.get("gguf_type") == gguf_type:
        if (out / str(earlier.get("file"))).is_file():
            return True
        raise LengenError(f"lengen hf export: {out} holds a broken export ({earlier.get('file')} is missing); "
                          "choose another --out")
    raise LengenError(f"lengen hf export: {out} holds another export ({earlier.get('spec')!r} as "
                      f"{earlier.get('gguf_type')} GGUF); choose another --out")


def file_name(source: dict, spec: str, gguf_type: str) -> str:
    stem = Path(source.get("gguf_file") or source.get("path") or "model").name.removesuffix(".gguf")
    method = spec.split(":")[0]
    return f"{stem}-{method}-{gguf_type}.gguf"


def export(model, spec: str, out, tokenizer=None, *, length: int | None = None, train_length: int | None = None,
           check_length: int | None = None, source: dict | None = None, gguf_type: str = "f32",
           **options) -> dict:
    """Write `model` extended with `spec` as one GGUF file for llama.cpp in `out` (see the module
    docstring); returns the record written to `out`/lengen_export.json."""
    out = Path(out)
    check_type(gguf_type)
    p = plan(model, spec, options, train_length, length)
    source = source or {"path": None, "fingerprint": None}
    if check_out(out, p.spec, source.get("fingerprint"), gguf_type):
        return io.read_json(out / ex.RECORD)
    vocab, vocab_from = vocab_keys(tokenizer, source, int(model.config.vocab_size))
    n = int(check_length or p.L0 + max(p.L0 // 4, 1))
    why_not = "llama.cpp runs Self-Extend as a setting of llama-completion, which llama-cpp-python does not " \
              "expose; its group attention also shifts the KV cache block by block as tokens arrive, not " \
              "lengen's two-attention Self-Extend: not compared" if p.command else llama_cpp_missing()
    expected = None
    if why_not is None:
        ids, expected = ex.reference_logits(model, p.spec, p.L0, n)
        expected = expected[0]
    name = file_name(source, p.spec, gguf_type)
    arch = FAMILIES[model.config.model_type]
    with io.atomic_folder(out) as tmp:   # out does not exist (check_out)
        write(tmp / name, model, p, vocab, gguf_type)
        verified = None
        if expected is not None:
            with tempfile.TemporaryDirectory() as work:
                got, versions = llama_cpp_logits(tmp / name, ids, Path(work))
                diff, scale = _max_diff(got, expected)
                del got
            bound = TOLERANCE[gguf_type] * max(scale, 1.0)
            if not diff <= bound:
                raise LengenError(f"lengen hf export: {p.spec!r}: the GGUF file's logits in llama.cpp differ from "
                                  f"lengen.hf.extend's by {diff:.3g} at {n} tokens (tolerance {bound:.3g}): "
                                  "not exported")
            verified = {"what": WHAT, "tokens": n, "max_abs_diff": diff, "max_abs_logit": scale,
                        "tolerance": bound, "relative_tolerance": TOLERANCE[gguf_type], **versions,
                        "torch": torch.__version__}
        record = {"spec": p.spec, "engine": ENGINE, "file": name, "gguf_type": gguf_type, "architecture": arch,
                  "gguf_keys": {**p.rope.keys(arch), f"{arch}.context_length": p.context},
                  "rope_freqs": p.rope.rope_freqs, "tokenizer": vocab_from, "train_length": p.L0,
                  "source": source, "lengen": __version__, "lengen_commit": git_commit(), "verified": verified}
        if verified is None:
            record["unverified"] = why_not
        if p.command:
            record["command"] = p.command.replace("FILE", name)
        io.write_json(tmp / ex.RECORD, record)
    return record
