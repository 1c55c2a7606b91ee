"""Take an extended model out of lengen: a model folder that plain transformers loads, with no
lengen import, and that gives `lengen.hf.extend`'s logits.

Only methods an engine implements natively can leave lengen: their settings become the engine's
own config keys (transformers' `rope_parameters`), the weights are saved unchanged. `SUPPORT` is
the one table of which engine runs which method, and how; `lengen hf export --list` prints it and
the tests read it. Every export is checked before it is kept: the exported folder is loaded in a
fresh interpreter in which lengen cannot be imported, and its logits on a sequence past the
trained length are compared with `lengen.hf.extend`'s on the source model. The folder carries
`lengen_export.json`: the spec, the source model's fingerprint, lengen's version and that check.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from lengen import __version__, io
from lengen.environment import git_commit
from lengen.errors import LengenError
from lengen.extrapolation import parse_spec
from lengen.hf.arch import SUPPORTED_MODEL_TYPES, inspect_model
from lengen.hf.methods import build
from lengen.hf.patch import extend, restore

RECORD = "lengen_export.json"
ENGINES = ("transformers", "vLLM", "SGLang", "llama.cpp")
#: method -> {engine: the engine's own keys or flags for it}; an engine missing from a row does not
#: implement the method (as read in each engine's source in 2026: transformers 5.24
#: modeling_rope_utils; vLLM's and SGLang's get_rope; llama.cpp's gguf constants, converter and
#: common/arg.cpp). `export` writes the transformers column, and the tests check it; the other
#: columns tell a user where else the method runs.
SUPPORT: dict[str, dict[str, str]] = {
    "pi": {"transformers": "rope_parameters: rope_type linear, factor",
           "vLLM": "rope_parameters: rope_type linear, factor",
           "SGLang": "rope_scaling: rope_type linear, factor",
           "llama.cpp": "GGUF {arch}.rope.scaling.type linear, .rope.scaling.factor (--rope-scaling linear --rope-scale N)"},
    "ntk": {"transformers": "rope_parameters: rope_theta, the scaled base",
            "vLLM": "rope_theta, the scaled base", "SGLang": "rope_theta, the scaled base",
            "llama.cpp": "GGUF {arch}.rope.freq_base (--rope-freq-base)"},
    "dynamic": {"transformers": "rope_parameters: rope_type dynamic, factor; max_position_embeddings stays L0"},
    "yarn": {"transformers": "rope_parameters: rope_type yarn, factor, original_max_position_embeddings, "
                             "beta_fast, beta_slow, truncate, attention_factor",
             "vLLM": "rope_parameters: rope_type yarn, factor, original_max_position_embeddings, beta_fast, "
                     "beta_slow, attn_factor (not attention_factor)",
             "SGLang": "rope_scaling: rope_type yarn, as vLLM",
             "llama.cpp": "GGUF {arch}.rope.scaling.type yarn, .factor, .original_context_length, .attn_factor "
                          "(a multiple of its own 0.1 ln s + 1; the llama architecture reads no beta key: 32 and 1) "
                          "(--rope-scaling yarn --rope-scale N --yarn-orig-ctx L0)"},
    "llama3": {"transformers": "rope_parameters: rope_type llama3, factor, low_freq_factor, high_freq_factor, "
                               "original_max_position_embeddings",
               "vLLM": "rope_parameters: rope_type llama3", "SGLang": "rope_scaling: rope_type llama3",
               "llama.cpp": "GGUF rope_freqs tensor: each pair's frequency divisor (its converter writes it from "
                            "rope_parameters)"},
    "longrope": {"transformers": "rope_parameters: rope_type longrope, short_factor, long_factor, "
                                 "original_max_position_embeddings, attention_factor",
                 "vLLM": "rope_parameters: rope_type longrope", "SGLang": "rope_scaling: rope_type longrope",
                 "llama.cpp": "GGUF {arch}.rope.scaling.type longrope, rope_factors_long/short tensors"},
    "dca": {"vLLM": "dual_chunk_attention_config: chunk_size, local_size, original_max_position_embeddings "
                    "(Qwen2; vLLM 0.9 and 0.10, VLLM_ATTENTION_BACKEND=DUAL_CHUNK_FLASH_ATTN)",
            "SGLang": "dual_chunk_attention_config, as vLLM (Qwen2; --attention-backend dual_chunk_flash_attn)"},
    "self_extend": {"llama.cpp": "llama-completion --grp-attn-n G --grp-attn-w W (not llama-server)"},
    "rerope": {}, "leaky_rerope": {}, "string": {}, "lambda": {}, "sinks": {}, "dpe": {}, "dope": {}, "logn": {},
}
#: what a user may expect from an engine that the table leaves out, and why
NOT_THE_SAME = {
    "dynamic": "vLLM's and SGLang's rope_type dynamic fixes the base once at start-up: not transformers' "
               "per-sequence dynamic NTK; llama.cpp has no dynamic NTK",
    "dca": "vLLM 0.11.0 and later still read dual_chunk_attention_config (its rotary embedding) but "
           "removed the attention backend that ran DCA: serve a DCA export with vLLM 0.10.x or SGLang; "
           "transformers has no DCA (it loads the folder as plain RoPE)",
    "yarn": "vLLM and SGLang read attn_factor, a multiplier of their own 0.1 ln(factor) + 1, not "
            "transformers' attention_factor: the same model at the default attention factor only",
    "logn": "Llama 4's attention temperature tuning (transformers, vLLM, SGLang) scales NoPE layers "
            "with another formula; Qwen's use_logn_attn is remote code only",
}
#: DCA leaves lengen as the config block vLLM and SGLang read (Qwen2.5-1M's), for the families
#: whose model code in those engines reads it; the block's keys and types (vLLM's
#: DualChunkRotaryEmbedding takes chunk_size and local_size, its DCA attention backend
#: original_max_position_embeddings for the temperature; 0 = none)
DCA_KEY = "dual_chunk_attention_config"
DCA_FAMILIES = ("qwen2",)
DCA_SCHEMA = {"chunk_size": int, "local_size": int, "original_max_position_embeddings": int}
DCA_ENGINES = {"vLLM": "0.9 or 0.10 (not >= 0.11.0): VLLM_ATTENTION_BACKEND=DUAL_CHUNK_FLASH_ATTN VLLM_USE_V1=0 vllm serve "
                       "DIR --enforce-eager --max-model-len LENGTH",
               "SGLang": "python -m sglang.launch_server --model-path DIR --attention-backend "
                         "dual_chunk_flash_attn --context-length LENGTH"}
#: the rope type each method's settings are written as, and its option -> key names
_TYPES = {"pi": "linear", "ntk": "default", "dynamic": "dynamic", "yarn": "yarn", "llama3": "llama3",
          "longrope": "longrope"}


def support_matrix() -> str:
    """`lengen hf export --list`: method x engine, from SUPPORT."""
    width = max(len(m) for m in SUPPORT)
    lines = ["method".ljust(width) + "  " + "  ".join(ENGINES),
             "-" * width + "  " + "  ".join("-" * len(e) for e in ENGINES)]
    for method, engines in SUPPORT.items():
        cells = ["yes".ljust(len(e)) if e in engines else "-".ljust(len(e)) for e in ENGINES]
        lines.append(method.ljust(width) + "  " + "  ".join(cells).rstrip())
    lines.append("")
    lines += [f"{method} in {engine}: {how}" for method, engines in SUPPORT.items() for engine, how in engines.items()]
    lines.append("")
    lines += [f"{method}, beware: {why}" for method, why in NOT_THE_SAME.items()]
    lines.append("`lengen hf export` writes the transformers column (a model folder) and checks it, and "
                 f"dca as the {DCA_KEY} of vLLM and SGLang ({', '.join(DCA_FAMILIES)}); with --format gguf, "
                 "llama.cpp's pi, ntk, yarn, llama3 (a GGUF file, checked with llama-cpp-python) and "
                 "self_extend (the unchanged file and its flags, not checked).")
    return "\n".join(lines)


def refusal(name: str) -> str:
    """Why `name` cannot be exported: which engines run it, or that none does."""
    engines = SUPPORT.get(name, {})
    served = ", ".join([f"{m} ({', '.join(e)})" for m, e in SUPPORT.items() if "transformers" in e]
                       + [f"dca ({', '.join(DCA_ENGINES)}: {', '.join(DCA_FAMILIES)})"])
    if engines:
        gguf = "; --format gguf writes it for llama.cpp" if "llama.cpp" in engines else ""
        return (f"{name} runs natively in {', '.join(engines)}, not in transformers{gguf}; exportable: {served}")
    return (f"no engine implements {name} natively, so an extended model cannot leave lengen with it "
            f"(use lengen.hf.extend, or `lengen hf eval`); exportable: {served}")


def rope_parameters(method, old: dict) -> dict:
    """transformers' rope_parameters for a built frequency method, from the model's own `old` ones
    (rope_theta and any key transformers keeps there)."""
    name = method.name
    params = {k: v for k, v in old.items() if k in ("rope_theta", "partial_rotary_factor")}
    params["rope_type"] = _TYPES[name]
    params["rope_theta"] = float(method.rope.base)
    L0 = int(method.rope.train_length)
    if name in ("pi", "dynamic"):
        params["factor"] = float(method.factor)
    elif name == "ntk":
        d = method.rope.rotary_dim
        params["rope_theta"] = float(method.rope.base * method.factor ** (d / (d - 2)))
    elif name == "yarn":
        params.update(factor=float(method.factor), original_max_position_embeddings=L0,
                      beta_fast=float(method.beta_fast), beta_slow=float(method.beta_slow),
                      truncate=bool(method.truncate), attention_factor=float(method.attention_factor))
    elif name == "llama3":
        params.update(factor=float(method.factor), low_freq_factor=float(method.low_freq_factor),
                      high_freq_factor=float(method.high_freq_factor), original_max_position_embeddings=L0)
    elif name == "longrope":
        params.update(short_factor=[float(x) for x in method.short_factor],
                      long_factor=[float(x) for x in method.long_factor], factor=float(method.factor),
                      original_max_position_embeddings=L0, attention_factor=float(method.attention_factor))
    return params


def check_causal_lm(config, model_path) -> None:
    """Refuse a folder whose config is not a causal LM lengen.hf extends (before weights load)."""
    architectures = getattr(config, "architectures", None) or []
    if architectures and not any(a.endswith("ForCausalLM") for a in architectures):
        raise LengenError(f"lengen hf export: {model_path} is not a causal language model "
                          f"({', '.join(architectures)})")
    if getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        raise LengenError(f"lengen hf export: model_type {getattr(config, 'model_type', None)!r} in "
                          f"{model_path} is not one lengen.hf extends ({', '.join(sorted(SUPPORTED_MODEL_TYPES))})")


def _target_length(method, length: int | None) -> int:
    """max_position_embeddings of the export: the asked length, else L0 x the method's factor.
    Dynamic NTK keeps L0: transformers scales by the sequence's length over that value."""
    L0 = int(method.rope.train_length)
    if method.name == "dynamic":
        return L0
    if length is not None:
        return int(length)
    return int(round(L0 * float(getattr(method, "factor", 1.0) or 1.0)))


def check_exportable(spec: str, length: int | None = None, model_type: str | None = None) -> None:
    """Refuse a spec no export can hold (before any model is loaded): a method transformers does
    not run (DCA aside: its engines' config block), a combination (a config holds one rope
    scaling), DCA without the `length` to serve or on a family its engines do not run it for."""
    names = [name for name, _ in parse_spec(spec)]
    for name in names:
        if "transformers" not in SUPPORT.get(name, {}) and name != "dca":
            raise LengenError(f"lengen hf export: {spec!r}: " + refusal(name))
    if len(names) != 1:
        raise LengenError(f"lengen hf export: {spec!r} combines {' + '.join(names)}; an engine's config "
                          "holds one rope scaling" + (" (vLLM ignores rope scaling under DCA)" if "dca" in names else ""))
    if names == ["dca"] and model_type is not None and model_type not in DCA_FAMILIES:
        raise LengenError(f"lengen hf export: dca: vLLM and SGLang read {DCA_KEY} in "
                          f"{', '.join(DCA_FAMILIES)} models, not {model_type}")
    if names == ["dca"] and length is None:
        raise LengenError(f"lengen hf export: {spec!r}: DCA has no factor to size the context by: give "
                          "--length (the max_position_embeddings to serve, e.g. 4x the trained length)")


def _plan(model, spec: str, options: dict, train_length: int | None, length: int | None = None):
    """(method, spec string, the config attributes the export sets, L0), or a LengenError saying
    why the model and spec cannot be exported."""
    parts = inspect_model(model, require_attention=False)
    check_exportable(spec, length, parts.model_type)
    if parts.required_method or parts.config_methods:
        raise LengenError("lengen hf export: the model's config already asks for a method "
                          f"({', '.join(parts.config_methods) or parts.required_method}); export starts "
                          "from plain RoPE")
    L0 = int(train_length or parts.original_length or parts.max_positions)
    if parts.layout != "half":
        raise LengenError(f"lengen hf export: {parts.model_type} rotates interleaved channel pairs; its "
                          "export is not checked yet (extend it in Python instead)")
    if parse_spec(spec)[0][0] == "dca":
        return _plan_dca(parts, spec, options, L0)
    # transformers applies a rotary table's rope_parameters to every layer reading it: a table may
    # take the method only if lengen extends every RoPE layer of it (sliding layers whose window
    # reaches past L0 included), and leaves alone one lengen extends in none of them
    extended = {}
    for layer in parts.layers:
        if layer.kind != "nope":
            extended.setdefault(layer.table, set()).add(layer.extended(L0))
    mixed = sorted(k or "the model's" for k, seen in extended.items() if len(seen) > 1)
    if mixed:
        kinds = sorted({layer.kind for layer in parts.layers})
        raise LengenError(f"lengen hf export: {parts.model_type} has {', '.join(kinds)} layers sharing "
                          f"{', '.join(mixed)} rotary table; transformers would apply the rope parameters "
                          "to all of them, where lengen.hf extends only some: not exportable (extend it in "
                          "Python instead)")
    touched = [key for key, seen in extended.items() if seen == {True}]
    old = getattr(model.config, "rope_parameters", None) or {}
    old = old if isinstance(old, dict) else {}
    built = {}
    for key in touched:
        built[key], spec_out = build(spec, options, parts.head_dim, parts.tables[key].base, L0)
    method = built[touched[0]]
    if touched == [""]:
        params = rope_parameters(method, old)
    else:   # one rope_parameters per layer type (Gemma 3, OLMo 3): only the extended types change
        params = {key: (rope_parameters(built[key], old.get(key, {})) if key in built else old[key])
                  for key in old}
    _check_config(model.config, params, spec_out)
    updates = {"rope_parameters": params}
    # Phi-3 keeps its pretraining length beside rope_parameters, and transformers reads it first
    if getattr(model.config, "original_max_position_embeddings", None) is not None \
            and "original_max_position_embeddings" in params:
        updates["original_max_position_embeddings"] = params["original_max_position_embeddings"]
    return method, spec_out, updates, L0


def _plan_dca(parts, spec: str, options: dict, L0: int):
    """DCA's plan: the dual_chunk_attention_config block vLLM and SGLang read (rope_parameters
    unchanged: vLLM ignores rope scaling under DCA)."""
    try:
        method, spec_out = build(spec, options, parts.head_dim, parts.tables[""].base, L0)
    except ValueError as e:
        raise LengenError(f"lengen hf export: {spec!r}: {e}") from None
    problem = method.window_problem()
    if problem:
        raise LengenError(f"lengen hf export: {spec_out!r}: {problem}")
    block = {"chunk_size": method.chunk_size, "local_size": method.local_size,
             "original_max_position_embeddings": method.original_length}
    problem = dca_schema_problem(block)
    if problem:
        raise LengenError(f"lengen hf export: {spec_out!r}: {problem}")
    return method, spec_out, {DCA_KEY: block}, L0


def dca_schema_problem(block) -> str | None:
    """What vLLM's DCA would reject or misread in a dual_chunk_attention_config block, or None:
    its keys and types, 0 <= local_size < chunk_size, and chunks whole in KV-cache blocks of 16
    (vLLM's DCA backend cuts the cache at chunk_size - local_size)."""
    if not isinstance(block, dict) or set(block) != set(DCA_SCHEMA):
        return f"{DCA_KEY} must hold exactly {', '.join(DCA_SCHEMA)}"
    for key, kind in DCA_SCHEMA.items():
        if type(block[key]) is not kind or block[key] < 0:
            return f"{DCA_KEY}.{key} must be a non-negative {kind.__name__} (got {block[key]!r})"
    s = block["chunk_size"] - block["local_size"]
    if s <= 0:
        return f"{DCA_KEY}: local_size must be below chunk_size"
    if s % 16:
        return (f"chunk_size - local_size = {s} is not a multiple of 16, vLLM's KV-cache block: "
                "choose chunk_size and local_size so that it is")
    return None


def _check_config(config, params: dict, spec: str) -> None:
    """transformers' own validation of the new rope_parameters on a copy of the config (Phi-3's,
    say, takes longrope only), before any work."""
    trial = copy.deepcopy(config)
    try:
        trial.rope_parameters = params
        if hasattr(trial, "validate"):
            trial.validate()
    except Exception as e:   # noqa: BLE001 - the config class's validator: any error is a refusal
        reason = " ".join(str(e).split())[:300] or type(e).__name__
        raise LengenError(f"lengen hf export: {spec!r}: transformers' {config.model_type} config does not "
                          f"take these rope_parameters: {reason}") from None


def engine_of(spec: str) -> str:
    """The engine(s) a (transformers-format) export of `spec` is written for, as its record says."""
    return ", ".join(DCA_ENGINES) if parse_spec(spec)[0][0] == "dca" else "transformers"


def check_out(out: Path, spec: str, fingerprint: str | None, engine: str = "transformers") -> bool:
    """True when `out` already holds this export for `engine` (nothing to do); refuse any other
    folder there. Without the source's fingerprint (a model passed from Python) no folder can be
    shown to hold the same export, so an existing one is refused."""
    if not out.exists():
        return False
    record = out / RECORD
    try:
        earlier = io.read_json(record)
    except (OSError, ValueError):
        raise LengenError(f"lengen hf export: {out} exists and is not a lengen export (no readable "
                          f"{RECORD}); choose another --out") from None
    if fingerprint is not None and earlier.get("spec") == spec \
            and earlier.get("source", {}).get("fingerprint") == fingerprint \
            and earlier.get("engine", "transformers") == engine:
        return True
    raise LengenError(f"lengen hf export: {out} holds another export ({earlier.get('spec')!r} of "
                      f"{earlier.get('source', {}).get('fingerprint')} for {earlier.get('engine')}); "
                      "choose another --out")


def _save(model, folder: Path, updates: dict, max_positions: int) -> None:
    """save_pretrained with the export's config (`updates`: config attribute -> value); the
    model's own config is left as it was. A model loaded from a GGUF file holds dequantized
    weights, but transformers still marks it quantized (and refuses to save it): the mark is
    lifted for the save, so the weights are written as the plain tensors they are."""
    config = model.config
    quantizer = getattr(model, "hf_quantizer", None)
    method = getattr(getattr(quantizer, "quantization_config", None), "quant_method", None)
    gguf = quantizer is not None and str(getattr(method, "value", method)) == "gguf"
    updates = {**updates, "max_position_embeddings": max_positions}
    missing = object()
    saved = {key: getattr(config, key, missing) for key in updates}   # DCA's key is new to the config
    quantization = config.__dict__.pop("quantization_config", None) if gguf else None
    try:
        for key, value in updates.items():
            setattr(config, key, value)
        if gguf:
            model.hf_quantizer = None
        model.save_pretrained(folder, safe_serialization=True)
    except (ValueError, OSError, RuntimeError) as e:
        raise LengenError(f"lengen hf export: transformers cannot save this model: {' '.join(str(e).split())[:300]}") from None
    finally:
        for key, value in saved.items():
            if value is missing:
                delattr(config, key)
            else:
                setattr(config, key, value)
        if gguf:
            model.hf_quantizer = quantizer
            if quantization is not None:
                config.quantization_config = quantization


#: run in a fresh interpreter: lengen made unimportable, the exported folder loaded by transformers
_CHECK = r"""
import json, sys, logging, warnings
sys.modules["lengen"] = None
try:
    import lengen
    raise SystemExit("lengen is importable")
except ImportError:
    pass
import torch, transformers
messages = []
class Keep(logging.Handler):
    def emit(self, record):
        messages.append(record.getMessage())
logging.getLogger("transformers").addHandler(Keep(level=logging.WARNING))
warnings.simplefilter("error", FutureWarning)
folder, ids_path, out_path = sys.argv[1:4]
model = transformers.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
ids = torch.load(ids_path)
with torch.no_grad():
    torch.save(model.eval()(ids).logits, out_path)
# transformers 5.0's validator of rope_type dynamic (and others) forgot rope_theta, the key 5.0
# itself moved into rope_parameters: it warns about every such config, its own too
known = "Unrecognized keys in `rope_parameters`"
print(json.dumps({"transformers": transformers.__version__,
                  "warnings": [m for m in messages if "rope" in m.lower()
                               and not (m.startswith(known) and m.endswith("{'rope_theta'}"))]}))
"""


def run_without_lengen(script: str, args, cwd: Path, failure: str) -> dict:
    """The JSON last line `script` prints, run in a new Python process (-I, no PYTHONPATH) in which
    `import lengen` fails; LengenError(`failure`: the last line of its stderr) when it fails."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-I", "-c", script, *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise LengenError(f"lengen hf export: {failure}: {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def reference_logits(model, spec: str, L0: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [1, n], float32 logits [1, n, vocab] on the CPU): `model` extended with `spec` on a
    seeded random sequence, what every export must reproduce; the model is restored after."""
    ids = torch.randint(0, int(model.config.vocab_size), (1, n), generator=torch.Generator().manual_seed(0))
    extend(model, spec, train_length=L0)
    try:
        with torch.no_grad():
            return ids, model.eval()(ids.to(model.device)).logits.float().cpu()
    finally:
        restore(model)


def check_in_fresh_interpreter(folder: Path, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """(logits, {"transformers": version, "warnings": [...]}) of the folder as plain transformers
    loads it, in a new Python process where `import lengen` fails."""
    with tempfile.TemporaryDirectory() as tmp:
        ids_path, out_path = Path(tmp) / "ids.pt", Path(tmp) / "logits.pt"
        torch.save(ids, ids_path)
        loaded = run_without_lengen(_CHECK, [folder, ids_path, out_path], Path(tmp),
                                    "the exported folder does not load in plain transformers")
        return torch.load(out_path), loaded


def export(model, spec: str, out, tokenizer=None, *, length: int | None = None,
           train_length: int | None = None, check_length: int | None = None, source: dict | None = None,
           **options) -> dict:
    """Write `model` extended with `spec` as a model folder transformers loads by itself (see the
    module docstring); returns the record written to `out`/lengen_export.json.

    `length`: max_position_embeddings of the export (default: L0 x the factor); `check_length`:
    the tokens of the checking sequence (default: L0 + L0 / 4, past the trained length; the whole
    model runs twice on it). `source`: what the model was loaded from ({"path", "fingerprint"}); with
its fingerprint, an `out` that already holds this export is returned as it is (else refused)."""
    out = Path(out)
    method, spec, updates, L0 = _plan(model, spec, options, train_length, length)
    source = source or {"path": None, "fingerprint": None}
    if check_out(out, spec, source.get("fingerprint"), engine_of(spec)):
        return io.read_json(out / RECORD)
    max_positions = _target_length(method, length)
    dca = DCA_KEY in updates
    # transformers runs no DCA: the check is on the longest sequence where DCA is plain RoPE
    s = method.chunk_size - method.local_size if dca else None
    if dca and check_length and check_length > s:
        raise LengenError(f"lengen hf export: --check-length {check_length}: a DCA export is checked at most "
                          f"at chunk_size - local_size = {s} tokens, where DCA is plain RoPE (transformers "
                          "has no DCA to check further)")
    n = int(check_length or (s if dca else L0 + max(L0 // 4, 1)))
    ids, expected = reference_logits(model, spec, L0, n)
    with io.atomic_folder(out) as tmp:   # out does not exist (check_out)
        _save(model, tmp, updates, max_positions)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        got, loaded = check_in_fresh_interpreter(tmp, ids.cpu())
        diff = float((got.float() - expected).abs().max())
        scale = float(expected.abs().max())
        if diff > 1e-4 * max(scale, 1.0) or loaded["warnings"]:
            raise LengenError(f"lengen hf export: {spec!r}: the exported folder's logits differ from "
                              f"lengen.hf.extend's by {diff:.3g} at {n} tokens"
                              + (f"; transformers warned: {loaded['warnings'][0]}" if loaded["warnings"] else "")
                              + ": not exported")
        what = ("logits of the exported folder in a fresh interpreter without lengen, against "
                "lengen.hf.extend on the source model")
        if dca:
            what += (f", at {n} tokens, where DCA is plain RoPE (transformers runs no DCA); the "
                     f"{DCA_KEY} block against vLLM's schema. DCA past {n} tokens is not run here")
        record = {"spec": spec, "engine": engine_of(spec),
                  **{k: v for k, v in updates.items() if k in ("rope_parameters", DCA_KEY)},
                  **({"serve": DCA_ENGINES} if dca else {}),
                  "max_position_embeddings": max_positions, "train_length": L0,
                  "source": source, "lengen": __version__, "lengen_commit": git_commit(),
                  "verified": {"what": what, "tokens": n, "max_abs_diff": diff,
                               "transformers": loaded["transformers"], "torch": torch.__version__}}
        io.write_json(tmp / RECORD, record)
    return record
