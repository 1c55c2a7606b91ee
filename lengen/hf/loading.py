"""A local Hugging Face model for `lengen hf eval` and `hf tune`, loaded offline: its config alone
(read_config, for checks before the weights), its tokenizer (a GGUF file's refused where the
installed transformers reads it wrongly), the model itself (`--attn banded` switched on), what the
tokenizer gives the corpus (corpus_encoder, bos_prefix), and the notes on `--attn` printed before
the work (attention_hints). transformers (the `hf` extra) is imported on use."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import torch

from lengen.data import TextEncoder
from lengen.errors import LengenError
from lengen.hf import banded
from lengen.hf.arch import inspect_model

if TYPE_CHECKING:  # the settings read the config with read_config; only type hints go the other way
    from lengen.hf.settings import EvalSettings


_LOAD_ERRORS = (OSError, ValueError, KeyError, ImportError)


def _load_kwargs(gguf_file: str | None) -> dict:
    """What every from_pretrained call here passes: local files only, and the GGUF file if any."""
    return {"local_files_only": True, **({"gguf_file": gguf_file} if gguf_file else {})}


def load_reason(e: Exception) -> str:
    return " ".join(str(e).split())[:300] or type(e).__name__   # the whole reason, on one line


def gguf_tokenizer_problem(tokenizer_class: str, transformers_version: str) -> str | None:
    """Why this transformers release reads a GGUF file's tokenizer wrongly, or None. Measured on
    Gemma 3 270M's GGUF (2026-11-28): 5.0-5.17 split text with other merges than the model's
    (perplexity 106 instead of 5.1 at 512 tokens), 5.18-5.22 add no BOS; 5.23 and 5.24 are right."""
    if "Gemma" not in tokenizer_class:
        return None
    version = tuple(int(p) for p in transformers_version.split(".")[:2] if p.isdigit())
    if version >= (5, 23):
        return None
    what = "splits text with other merges than the model's" if version < (5, 18) else "adds no BOS"
    return (f"transformers {transformers_version} reads a Gemma GGUF tokenizer wrongly (it {what}); "
            "GGUF Gemma models need transformers >= 5.23: pip install -U transformers")


def read_config(model_path: str, gguf_file: str | None = None):
    """The model's config alone (cheap: no weights), for checks before the model loads."""
    from transformers import AutoConfig   # optional (lengen[hf]): imported on use

    try:
        return AutoConfig.from_pretrained(model_path, **_load_kwargs(gguf_file))
    except (OSError, ValueError, KeyError) as e:
        raise LengenError(f"cannot read the model config in {model_path}: {load_reason(e)}") from None


def load_tokenizer(settings: EvalSettings):
    """The model folder's tokenizer alone (cheap: for checks before the model loads); the folder
    is checked here."""
    settings.check_model_path()
    try:
        import transformers   # optional (lengen[hf]): imported on use
    except ImportError:
        raise LengenError("lengen hf needs transformers: pip install 'lengen[hf]'") from None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(settings.model_path,
                                                               **_load_kwargs(settings.gguf_file))
    except _LOAD_ERRORS as e:
        raise LengenError(f"cannot load a tokenizer from {settings.model_path}: {load_reason(e)}") from None
    problem = settings.gguf_file and gguf_tokenizer_problem(type(tokenizer).__name__, transformers.__version__)
    if problem:
        raise LengenError(problem)
    return tokenizer


def load(settings: EvalSettings, tokenizer=None):
    """(model, tokenizer) from a local folder, offline; LengenError when it cannot be loaded.
    `tokenizer`: one already loaded by load_tokenizer."""
    try:
        from transformers import AutoModelForCausalLM   # optional (lengen[hf]): imported on use
    except ImportError:
        raise LengenError("lengen hf needs transformers: pip install 'lengen[hf]'") from None
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(settings)   # checks the folder
    try:
        model = AutoModelForCausalLM.from_pretrained(
            settings.model_path, dtype=getattr(torch, settings.dtype),
            attn_implementation="sdpa" if settings.attn == "banded" else settings.attn,
            **_load_kwargs(settings.gguf_file))
    except _LOAD_ERRORS as e:
        raise LengenError(f"cannot load a model from {settings.model_path}: {load_reason(e)}") from None
    if settings.attn == "banded":
        banded.use(model)
    return model.eval(), tokenizer


def banded_hint(model, attn: str, longest: int) -> str | None:
    """A line suggesting --attn banded where sdpa would build T x T masks for sliding-window
    layers at inputs well beyond their window (4x or more), else None."""
    if attn != "sdpa" or not longest:
        return None
    try:
        layers = inspect_model(model, require_attention=False).layers
    except LengenError:
        return None
    windows = sorted({layer.window for layer in layers if layer.kind == "sliding" and layer.window})
    sliding = sum(layer.kind == "sliding" for layer in layers)
    if not windows or longest < 4 * windows[0]:
        return None
    return (f"note: {sliding} of {len(layers)} layers attend within a sliding window of "
            f"{windows[0]:,} tokens; with --attn sdpa they get a {longest:,} x {longest:,} mask "
            f"and each scores every pair. --attn banded computes them in bands (equal up to "
            f"rounding; docs/huggingface.md)")


def math_kernel_hint(config, attn: str, longest: int, device: torch.device, dtype: torch.dtype) -> str | None:
    """A line suggesting --attn banded where transformers' sdpa would score a grouped-query model
    on the math kernel (CUDA, float32; lengen.hf.banded.gqa_falls_to_math) with 1 GiB or more of
    scores per layer, else None."""
    config = config.get_text_config()
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    gib = heads * longest ** 2 * 4 / 2 ** 30
    if attn != "sdpa" or gib < 1 or not banded.gqa_falls_to_math(device.type, dtype, heads, kv_heads):
        return None
    return (f"note: on CUDA in float32, transformers' sdpa runs this model's grouped-query layers "
            f"({heads} query, {kv_heads} key/value heads) on PyTorch's math kernel, which holds "
            f"{heads} x {longest:,} x {longest:,} scores ({gib:,.0f} GiB) a layer; --attn banded repeats "
            f"the keys and values so that the memory-efficient kernel takes them (or --dtype bfloat16)")


def attention_hints(model, attn: str, longest: int, device: torch.device, precision: str = "fp32") -> list[str]:
    """The notes `lengen hf eval` and `hf tune` print before the work: where another --attn
    would avoid T x T memory at these lengths (bf16 precision: autocast, so attention in bfloat16)."""
    dtype = torch.bfloat16 if precision == "bf16" else next(model.parameters()).dtype
    hints = (banded_hint(model, attn, longest), math_kernel_hint(model.config, attn, longest, device, dtype))
    return [h for h in hints if h]


def corpus_encoder(tokenizer) -> TextEncoder:
    """The model's tokenizer as a lengen.data tokenizer; its cache name hashes the tokenizer's
    full definition (or vocabulary), so another tokenizer never reuses cached tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    spec = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    name = f"hf-{type(tokenizer).__name__}-{hashlib.sha256(spec.encode()).hexdigest()[:16]}"

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    eos = tokenizer.eos_token_id
    if eos is None:   # documents are then joined by a newline
        eos = (encode("\n") or [0])[-1]
    return TextEncoder(encode, name, int(eos))


def bos_prefix(tokenizer) -> list[int]:
    """[BOS] when the tokenizer begins every text it encodes with it (Gemma, Llama: their models
    were trained so, and Gemma degrades without it), else []. Scored sequences begin with it."""
    bos = tokenizer.bos_token_id
    ids = tokenizer("a")["input_ids"]
    return [int(bos)] if bos is not None and ids and ids[0] == bos else []
