"""Find, in a Hugging Face causal LM, the pieces lengen.hf acts on, and refuse what it cannot handle.

A supported model has the Llama rotary layout: one rotary module computing cos/sin from an
`inv_freq` buffer times an `attention_scaling` factor (half-split `rotate_half` layout applied to
all channels of q and k), attention layers that dispatch through transformers'
`ALL_ATTENTION_FUNCTIONS` and plain RoPE (`rope_type == "default"`) as trained.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from lengen.errors import LengenError

# model types whose attention is the Llama layout (verified with tiny configs in the tests);
# another type with the same layout can be added here at the caller's own risk
SUPPORTED_MODEL_TYPES = {"llama", "mistral", "qwen2", "qwen3"}
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
    if rope_type != "default":
        raise LengenError(f"the model already uses rope_type {rope_type!r}; lengen.hf methods start "
                          "from plain RoPE, load the model without rope scaling")
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
                      max_positions=int(config.max_position_embeddings), attn_implementation=impl)
