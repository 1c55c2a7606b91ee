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
import shutil
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
    "dca": {"SGLang": "dual_chunk_attention_config: chunk_size, local_size (backend dual_chunk_flash_attn; "
                      "its removal is proposed)"},
    "self_extend": {"llama.cpp": "llama-completion --grp-attn-n G --grp-attn-w W (not llama-server)"},
    "rerope": {}, "leaky_rerope": {}, "string": {}, "lambda": {}, "sinks": {}, "logn": {},
}
#: what a user may expect from an engine that the table leaves out, and why
NOT_THE_SAME = {
    "dynamic": "vLLM's and SGLang's rope_type dynamic fixes the base once at start-up: not transformers' "
               "per-sequence dynamic NTK; llama.cpp has no dynamic NTK",
    "dca": "vLLM still parses dual_chunk_attention_config, but the attention backend that ran it was "
           "removed in v0.11.0",
    "logn": "Llama 4's attention temperature tuning (transformers, vLLM, SGLang) scales NoPE layers "
            "with another formula; Qwen's use_logn_attn is remote code only",
}
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
    lines += [f"{method}, not listed: {why}" for method, why in NOT_THE_SAME.items()]
    lines.append("`lengen hf export` writes the transformers column (a model folder) and checks it; with "
                 "--format gguf, llama.cpp's pi, ntk, yarn, llama3 (a GGUF file, checked with llama-cpp-python) "
                 "and self_extend (the unchanged file and its flags, not checked).")
    return "\n".join(lines)


def refusal(name: str) -> str:
    """Why `name` cannot be exported: which engines run it, or that none does."""
    engines = SUPPORT.get(name, {})
    served = ", ".join(f"{m} ({', '.join(e)})" for m, e in SUPPORT.items() if "transformers" in e)
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


def check_exportable(spec: str) -> None:
    """Refuse a spec no export can hold (before any model is loaded): a method transformers does
    not run, or a combination (a config holds one rope scaling)."""
    names = [name for name, _ in parse_spec(spec)]
    for name in names:
        if "transformers" not in SUPPORT.get(name, {}):
            raise LengenError(f"lengen hf export: {spec!r}: " + refusal(name))
    if len(names) != 1:
        raise LengenError(f"lengen hf export: {spec!r} combines {' + '.join(names)}; an engine's config "
                          "holds one rope scaling")


def _plan(model, spec: str, options: dict, train_length: int | None):
    """(method, spec string, new config rope_parameters, L0), or a LengenError saying why the
    model and spec cannot be exported."""
    check_exportable(spec)
    parts = inspect_model(model, require_attention=False)
    if parts.required_method or parts.config_methods:
        raise LengenError("lengen hf export: the model's config already asks for a method "
                          f"({', '.join(parts.config_methods) or parts.required_method}); export starts "
                          "from plain RoPE")
    L0 = int(train_length or parts.original_length or parts.max_positions)
    if parts.layout != "half":
        raise LengenError(f"lengen hf export: {parts.model_type} rotates interleaved channel pairs; its "
                          "export is not checked yet (extend it in Python instead)")
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
    return method, spec_out, params, L0


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


def _save(model, folder: Path, params: dict, max_positions: int) -> None:
    """save_pretrained with the export's config; the model's own config is left as it was. A model
    loaded from a GGUF file holds dequantized weights, but transformers still marks it quantized
    (and refuses to save it): the mark is lifted for the save, so the weights are written as the
    plain tensors they are."""
    config = model.config
    quantizer = getattr(model, "hf_quantizer", None)
    method = getattr(getattr(quantizer, "quantization_config", None), "quant_method", None)
    gguf = quantizer is not None and str(getattr(method, "value", method)) == "gguf"
    saved = (config.rope_parameters, config.max_position_embeddings)
    # Phi-3 keeps its pretraining length beside rope_parameters, and transformers reads it first
    original = getattr(config, "original_max_position_embeddings", None)
    quantization = config.__dict__.pop("quantization_config", None) if gguf else None
    try:
        config.rope_parameters, config.max_position_embeddings = params, max_positions
        if original is not None and "original_max_position_embeddings" in params:
            config.original_max_position_embeddings = params["original_max_position_embeddings"]
        if gguf:
            model.hf_quantizer = None
        model.save_pretrained(folder, safe_serialization=True)
    except (ValueError, OSError, RuntimeError) as e:
        raise LengenError(f"lengen hf export: transformers cannot save this model: {' '.join(str(e).split())[:300]}") from None
    finally:
        config.rope_parameters, config.max_position_embeddings = saved
        if original is not None:
            config.original_max_position_embeddings = original
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


def check_in_fresh_interpreter(folder: Path, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """(logits, {"transformers": version, "warnings": [...]}) of the folder as plain transformers
    loads it, in a new Python process where `import lengen` fails."""
    with tempfile.TemporaryDirectory() as tmp:
        ids_path, out_path = Path(tmp) / "ids.pt", Path(tmp) / "logits.pt"
        torch.save(ids, ids_path)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = subprocess.run([sys.executable, "-I", "-c", _CHECK, str(folder), str(ids_path), str(out_path)],
                              capture_output=True, text=True, cwd=tmp, env=env)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise LengenError(f"lengen hf export: the exported folder does not load in plain transformers: {tail}")
        return torch.load(out_path), json.loads(done.stdout.strip().splitlines()[-1])


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
    method, spec, params, L0 = _plan(model, spec, options, train_length)
    source = source or {"path": None, "fingerprint": None}
    if check_out(out, spec, source.get("fingerprint")):
        return io.read_json(out / RECORD)
    max_positions = _target_length(method, length)
    n = int(check_length or L0 + max(L0 // 4, 1))
    vocab = int(model.config.vocab_size)
    ids = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(0))
    extend(model, spec, train_length=L0)
    try:
        with torch.no_grad():
            expected = model.eval()(ids.to(model.device)).logits.float().cpu()
    finally:
        restore(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.resolve().parent))
    try:
        _save(model, tmp, params, max_positions)
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
        record = {"spec": spec, "engine": "transformers", "rope_parameters": params,
                  "max_position_embeddings": max_positions, "train_length": L0,
                  "source": source, "lengen": __version__, "lengen_commit": git_commit(),
                  "verified": {"what": "logits of the exported folder in a fresh interpreter without lengen, "
                                       "against lengen.hf.extend on the source model",
                               "tokens": n, "max_abs_diff": diff, "transformers": loaded["transformers"],
                               "torch": torch.__version__}}
        io.write_json(tmp / RECORD, record)
        tmp.rename(out)   # out does not exist (check_out): the folder appears whole or not at all
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return record
