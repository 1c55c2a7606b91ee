"""Find, in a Hugging Face causal LM, the pieces lengen.hf acts on, and refuse what it cannot handle.

A supported model has a Llama-style rotary module computing cos/sin (Llama 4: complex
exponentials) from an `inv_freq` buffer times an `attention_scaling` factor (one table, or one per
layer type: Gemma 3, OLMo 3), applied to all channels of q and k (half-split `rotate_half` layout;
Llama 4 rotates consecutive pairs), attention layers that dispatch through transformers'
`ALL_ATTENTION_FUNCTIONS` and plain RoPE (`rope_type == "default"`) as trained.

Each decoder layer is one `Layer` of a kind: "rope" (global RoPE), "sliding" (RoPE inside a
sliding window: Gemma 2/3, OLMo 3, SmolLM3's optional windows), "chunked" (RoPE inside attention
chunks: Llama 4) or "nope" (no positions: SmolLM3, Llama 4). `Layer.extended` says where a method
applies (docs/huggingface.md, "Hybrid-layer models").

Two configs that ask for a lengen method are read instead of refused (`config_methods`): a
`rope_type: longrope` rope_parameters / rope_scaling (Phi-3 style; only the "longrope" method may
then be applied, its options default from the config) and Qwen2.5-1M's
`dual_chunk_attention_config` (transformers runs such a model as plain RoPE; "dca" options default
from it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from lengen.errors import LengenError

# model types whose attention is the Llama layout (verified with tiny configs in the tests);
# another type with the same layout can be added here at the caller's own risk
LLAMA_LAYOUT_TYPES = {"llama", "mistral", "phi3", "qwen2", "qwen3"}
# hybrid-layer families (per-layer kinds below), also verified with tiny configs in the tests
HYBRID_TYPES = {"gemma2", "gemma3_text", "smollm3", "llama4_text", "olmo2", "olmo3", "granite",
                "qwen3_moe"}
SUPPORTED_MODEL_TYPES = LLAMA_LAYOUT_TYPES | HYBRID_TYPES
# Llama 4 rotates consecutive channel pairs (2i, 2i+1) as complex numbers; the others half-split
INTERLEAVED_TYPES = {"llama4_text"}
ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa", "lengen_banded")   # lengen.hf.banded.NAME
LAYER_KINDS = ("rope", "sliding", "chunked", "nope")


def check_train_length(train_length: int | None) -> None:
    """--train-length (L0) as hf eval, hf tune and hf methods take it: None (the config's) or an
    integer >= 2; 0 is refused, not read as "the config's"."""
    if train_length is not None and (type(train_length) is not int or train_length < 2):
        raise LengenError(f"--train-length must be >= 2 tokens (the context the model was trained on; "
                          f"leave it out for the config's), got {train_length}")


@dataclass
class RotaryTable:
    """One frequency table of the model's rotary module: `inv_freq` / `attention_scaling`, or
    `{layer_type}_inv_freq` / `{layer_type}_attention_scaling` where the model keeps one table
    per layer type (Gemma 3, OLMo 3: local and global RoPE bases)."""

    module: nn.Module
    prefix: str            # "" or e.g. "full_attention_"
    base: float            # its rope theta

    @property
    def inv_freq(self) -> torch.Tensor:
        return getattr(self.module, self.prefix + "inv_freq")

    @property
    def attention_scaling(self) -> float:
        return getattr(self.module, self.prefix + "attention_scaling")

    def set(self, inv_freq: torch.Tensor, attention_scaling: float) -> None:
        setattr(self.module, self.prefix + "inv_freq", inv_freq)
        setattr(self.module, self.prefix + "attention_scaling", attention_scaling)


@dataclass
class Layer:
    """One attention layer as lengen.hf sees it."""

    index: int
    attention: nn.Module
    kind: str                    # "rope" | "sliding" | "chunked" (RoPE inside a window) | "nope"
    window: int | None = None    # sliding window / attention chunk size: largest distance + 1
    table: str | None = None     # key of its RotaryTable in ModelParts.tables (None: NoPE)
    softcap: float | None = None # attention-logit soft-capping (Gemma 2), kept as the model's

    def extended(self, train_length: int) -> bool:
        """Whether a method applies here: RoPE layers do; a windowed layer only if its window
        reaches beyond the trained length (else it never sees an untrained distance); NoPE never."""
        if self.kind == "rope":
            return True
        return self.kind in ("sliding", "chunked") and self.window is not None \
            and self.window > train_length


@dataclass
class ModelParts:
    base: nn.Module                 # the decoder stack (LlamaModel); it receives position_ids
    rotary: nn.Module               # base.rotary_emb: inv_freq buffer(s) + attention_scaling
    layers: list[Layer]             # one per decoder layer
    tables: dict[str, RotaryTable]  # "" (one table) or one per layer type
    head_dim: int
    rope_base: float                # the base of the global (full-attention) RoPE layers
    max_positions: int              # config.max_position_embeddings
    attn_implementation: str        # "eager", "sdpa" or "lengen_banded" (what the model uses)
    model_type: str = "llama"
    layout: str = "half"            # "half" (rotate_half) or "interleaved" (Llama 4)
    # methods the config itself asks for: name -> default options for that part of a spec
    config_methods: dict = field(default_factory=dict)
    required_method: str | None = None   # a spec must contain this part (config rope_type longrope)
    original_length: int | None = None   # L0 the config gives for the method it asks for

    @property
    def attentions(self) -> list[nn.Module]:
        return [layer.attention for layer in self.layers]


def _config_value(config, key: str):
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if isinstance(params, dict) and params.get(key) is not None:
        return params[key]
    return getattr(config, key, None)   # transformers 4.x kept rope_theta at top level


def _layer_params(config, layer_type: str | None) -> dict:
    """The rope parameters of one layer type where the config keeps them per type (Gemma 3)."""
    params = getattr(config, "rope_parameters", None) or {}
    nested = isinstance(params, dict) and layer_type in params and isinstance(params[layer_type], dict)
    return params[layer_type] if nested else {}


def _tables(config, rotary: nn.Module) -> dict[str, RotaryTable]:
    """{layer type or "": RotaryTable} of the rotary module (refusing what is not plain RoPE)."""
    layer_types = sorted(set(getattr(config, "layer_types", None) or []))
    per_type = [t for t in layer_types if isinstance(getattr(rotary, f"{t}_inv_freq", None), torch.Tensor)]
    tables = {}
    for key in per_type or [""]:
        prefix = f"{key}_" if key else ""
        inv_freq = getattr(rotary, prefix + "inv_freq", None)
        if not isinstance(inv_freq, torch.Tensor) or not hasattr(rotary, prefix + "attention_scaling"):
            raise LengenError(f"{type(rotary).__name__} is not a Llama-style rotary module (no "
                              f"{prefix}inv_freq with {prefix}attention_scaling)")
        params = _layer_params(config, key) if key else {}
        rope_type = params.get("rope_type") if key else None
        if key and rope_type not in (None, "default"):
            raise LengenError(f"the model's {key} layers already use rope_type {rope_type!r}; lengen.hf "
                              "methods start from plain RoPE, load the model without rope scaling")
        theta = params.get("rope_theta") if key else None
        theta = theta if theta is not None else _config_value(config, "rope_theta")
        tables[key] = RotaryTable(rotary, prefix, float(theta if theta is not None else 10000.0))
    return tables


def _layer(config, index: int, attention: nn.Module, tables: dict) -> Layer:
    layer_types = getattr(config, "layer_types", None) or []
    layer_type = layer_types[index] if index < len(layer_types) else "full_attention"
    table = layer_type if layer_type in tables else ""
    softcap = getattr(attention, "attn_logit_softcapping", None)
    if not getattr(attention, "use_rope", True):      # SmolLM3, Llama 4: no_rope_layers[i] == 0
        return Layer(index, attention, "nope", softcap=softcap)
    window = getattr(attention, "sliding_window", None)
    if window:
        return Layer(index, attention, "sliding", int(window), table, softcap)
    chunk = getattr(config, "attention_chunk_size", None)
    if layer_type == "chunked_attention" and chunk:   # Llama 4: RoPE layers attend within chunks
        return Layer(index, attention, "chunked", int(chunk), table, softcap)
    return Layer(index, attention, "rope", None, table, softcap)


def decoder_stack(model: nn.Module) -> nn.Module:
    """The decoder stack of a causal LM (LlamaModel in LlamaForCausalLM), or the model itself.
    Not transformers' get_decoder(): it returns Llama4ForCausalLM itself (its base_model_prefix
    names no attribute of it)."""
    inner = getattr(model, "model", None)
    return inner if inner is not None and hasattr(model, "lm_head") else model.get_decoder()


def inspect_model(model: nn.Module, require_attention: bool = True) -> ModelParts:
    """The model's parts, or a LengenError that says why lengen.hf cannot extend it."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if config is None:
        raise LengenError(f"lengen.hf.extend expects a transformers model, got {type(model).__name__}")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise LengenError(
            f"lengen.hf does not support model_type {model_type!r} ({type(model).__name__}): "
            f"supported are the rotary causal LMs {sorted(SUPPORTED_MODEL_TYPES)} (Gemma 3 and "
            "Llama 4 as their text models, Gemma3ForCausalLM / Llama4ForCausalLM)")
    base = decoder_stack(model)
    rotary = getattr(base, "rotary_emb", None)
    if rotary is None:
        raise LengenError(f"{type(model).__name__} has no Llama-style rotary module "
                          "(model.model.rotary_emb with inv_freq and attention_scaling)")
    tables = _tables(config, rotary)
    rope_type = _config_value(config, "rope_type") or "default"
    if rope_type not in ("default", "longrope"):
        raise LengenError(f"the model already uses rope_type {rope_type!r}; lengen.hf methods start "
                          "from plain RoPE (or read a longrope config), load the model without rope "
                          "scaling")
    config_methods, required, original = config_method_options(config, rope_type)
    partial = _config_value(config, "partial_rotary_factor") or 1.0
    if float(partial) != 1.0:
        raise LengenError(f"partial_rotary_factor={partial} is not supported (only full-dimension RoPE)")
    if model_type in LLAMA_LAYOUT_TYPES and getattr(config, "sliding_window", None) \
            and getattr(config, "use_sliding_window", True):
        raise LengenError(f"sliding-window attention (sliding_window={config.sliding_window}) is not "
                          f"supported for {model_type}: set config.sliding_window = None before "
                          "extending")
    modules = [getattr(layer, "self_attn", None) for layer in (getattr(base, "layers", None) or [])]
    if not modules or any(a is None or not hasattr(a, "layer_idx") for a in modules):
        raise LengenError(f"{type(model).__name__}: no decoder layers with a self_attn module found")
    layers = [_layer(config, i, a, tables) for i, a in enumerate(modules)]
    head_dim = int(modules[0].head_dim)
    for key, table in tables.items():
        if table.inv_freq.numel() * 2 != head_dim:
            raise LengenError(f"the rotary module rotates {table.inv_freq.numel() * 2} of {head_dim} "
                              "channels; only full-dimension RoPE is supported")
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if require_attention and impl not in ATTENTION_IMPLEMENTATIONS:
        raise LengenError(f"attn_implementation {impl!r} is not supported by this method: load the "
                          f"model with attn_implementation='sdpa' or 'eager' (or lengen.hf.banded.use)")
    if require_attention and hasattr(model, "_can_set_attn_implementation") \
            and not model._can_set_attn_implementation():
        raise LengenError(f"{type(model).__name__} does not dispatch attention through transformers' "
                          "AttentionInterface")
    global_table = tables.get("full_attention", next(iter(tables.values())))
    return ModelParts(base=base, rotary=rotary, layers=layers, tables=tables, head_dim=head_dim,
                      rope_base=global_table.base, max_positions=int(config.max_position_embeddings),
                      attn_implementation=impl, model_type=model_type,
                      layout="interleaved" if model_type in INTERLEAVED_TYPES else "half",
                      config_methods=config_methods, required_method=required, original_length=original)


def config_method_options(config, rope_type: str) -> tuple[dict, str | None, int | None]:
    """({method name: options}, required method, L0) for the methods a config asks for."""
    max_pos = int(config.max_position_embeddings)
    if rope_type == "longrope":
        original = getattr(config, "original_max_position_embeddings", None) \
            or _config_value(config, "original_max_position_embeddings") or max_pos
        original = int(original)
        opts = {"short_factor": list(_config_value(config, "short_factor") or []),
                "long_factor": list(_config_value(config, "long_factor") or [])}
        if not opts["short_factor"] or not opts["long_factor"]:
            raise LengenError("the longrope config lacks short_factor / long_factor")
        factor = _config_value(config, "factor")
        opts["factor"] = float(factor) if factor is not None else max_pos / original
        if _config_value(config, "attention_factor") is not None:
            opts["attention_factor"] = float(_config_value(config, "attention_factor"))
        return {"longrope": opts}, "longrope", original
    dca = getattr(config, "dual_chunk_attention_config", None)
    if isinstance(dca, dict) and dca.get("chunk_size"):
        opts = {"chunk_size": int(dca["chunk_size"])}
        if dca.get("local_size") is not None:
            opts["local_size"] = int(dca["local_size"])
        if dca.get("original_max_position_embeddings"):
            opts["original_length"] = int(dca["original_max_position_embeddings"])
        return {"dca": opts}, None, None
    return {}, None, None
