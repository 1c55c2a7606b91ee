"""Find, in a Hugging Face causal LM, the pieces lengen.hf acts on, and refuse what it cannot handle.

A supported model has the Llama rotary layout: one rotary module computing cos/sin from an
`inv_freq` buffer times an `attention_scaling` factor (half-split `rotate_half` layout applied to
all channels of q and k), attention layers that dispatch through transformers'
`ALL_ATTENTION_FUNCTIONS` and plain RoPE (`rope_type == "default"`) as trained.

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
SUPPORTED_MODEL_TYPES = {"llama", "mistral", "phi3", "qwen2", "qwen3"}
ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa")


@dataclass
class ModelParts:
    base: nn.Module                 # the decoder stack (LlamaModel); it receives position_ids
    rotary: nn.Module               # base.rotary_emb: inv_freq buffer + attention_scaling
    attentions: list[nn.Module]     # one per layer, each with layer_idx and num_key_value_groups
    head_dim: int
    rope_base: float
    max_positions: int              # config.max_position_embeddings
    attn_implementation: str        # "eager" or "sdpa" (what the model was loaded with)
    # methods the config itself asks for: name -> default options for that part of a spec
    config_methods: dict = field(default_factory=dict)
    required_method: str | None = None   # a spec must contain this part (config rope_type longrope)
    original_length: int | None = None   # L0 the config gives for the method it asks for


def _config_value(config, key: str):
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if isinstance(params, dict) and params.get(key) is not None:
        return params[key]
    return getattr(config, key, None)   # transformers 4.x kept rope_theta at top level


def inspect_model(model: nn.Module, require_attention: bool = True) -> ModelParts:
    """The model's parts, or a LengenError that says why lengen.hf cannot extend it."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if config is None:
        raise LengenError(f"lengen.hf.extend expects a transformers model, got {type(model).__name__}")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise LengenError(
            f"lengen.hf does not support model_type {model_type!r} ({type(model).__name__}): "
            f"supported are the Llama-layout rotary models {sorted(SUPPORTED_MODEL_TYPES)}")
    base = getattr(model, "model", None) if hasattr(model, "lm_head") else model
    rotary = getattr(base, "rotary_emb", None)
    if rotary is None or not isinstance(getattr(rotary, "inv_freq", None), torch.Tensor) \
            or not hasattr(rotary, "attention_scaling"):
        raise LengenError(f"{type(model).__name__} has no Llama-style rotary module "
                          "(model.model.rotary_emb with inv_freq and attention_scaling)")
    rope_type = _config_value(config, "rope_type") or "default"
    if rope_type not in ("default", "longrope"):
        raise LengenError(f"the model already uses rope_type {rope_type!r}; lengen.hf methods start "
                          "from plain RoPE (or read a longrope config), load the model without rope "
                          "scaling")
    config_methods, required, original = config_method_options(config, rope_type)
    partial = _config_value(config, "partial_rotary_factor") or 1.0
    if float(partial) != 1.0:
        raise LengenError(f"partial_rotary_factor={partial} is not supported (only full-dimension RoPE)")
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        raise LengenError(f"sliding-window attention (sliding_window={config.sliding_window}) is not "
                          "supported: set config.sliding_window = None before extending")
    layers = getattr(base, "layers", None)
    attentions = [getattr(layer, "self_attn", None) for layer in (layers or [])]
    if not attentions or any(a is None or not hasattr(a, "layer_idx") for a in attentions):
        raise LengenError(f"{type(model).__name__}: no decoder layers with a self_attn module found")
    head_dim = int(attentions[0].head_dim)
    if rotary.inv_freq.numel() * 2 != head_dim:
        raise LengenError(f"the rotary module rotates {rotary.inv_freq.numel() * 2} of {head_dim} "
                          "channels; only full-dimension RoPE is supported")
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if require_attention and impl not in ATTENTION_IMPLEMENTATIONS:
        raise LengenError(f"attn_implementation {impl!r} is not supported by this method: load the "
                          f"model with attn_implementation='sdpa' or 'eager'")
    if require_attention and hasattr(model, "_can_set_attn_implementation") \
            and not model._can_set_attn_implementation():
        raise LengenError(f"{type(model).__name__} does not dispatch attention through transformers' "
                          "AttentionInterface")
    base_theta = _config_value(config, "rope_theta")
    return ModelParts(base=base, rotary=rotary, attentions=attentions, head_dim=head_dim,
                      rope_base=float(base_theta if base_theta is not None else 10000.0),
                      max_positions=int(config.max_position_embeddings), attn_implementation=impl,
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
