"""extend(model, method, **options) and restore(model): apply a lengen extrapolation method in place
to a Hugging Face causal LM, and undo it exactly.

Two routes, both through transformers' own extension points (no forward is replaced):
  * "rotary": a method that only changes frequencies, the same at every length (pi, ntk, yarn,
    llama3), writes its inv_freq and attention factor into the model's rotary module. The model's
    attention (eager, sdpa, flash, ...) runs unchanged: this is what transformers itself does for
    a `rope_parameters` config.
  * "attention": every other method (dynamic, remapping, log-n) sets the rotary module to the
    identity, and a lengen attention function registered with AttentionInterface applies the
    method to un-rotated q/k at their positions (lengen.hf.attention, lengen.hf.positions). The
    KV cache then holds un-rotated keys, so decoding with the cache gives the logits of full
    forward passes. Dynamic NTK re-rotates every cached key at the current length's frequencies
    (HF's own dynamic mixes bases in its cache, transformers#25104); its cached keys and values
    of layers >= 2 still come from hidden states computed at shorter lengths, which no cache can
    avoid, so there only the first layer equals a full forward exactly.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch import nn

from lengen.errors import LengenError
from lengen.hf import attention as attn
from lengen.hf.arch import ModelParts, inspect_model
from lengen.hf.methods import build, is_static_frequency
from lengen.hf.positions import PositionTracker
from lengen.extrapolation import parse_spec

_EXTENSIONS: "weakref.WeakKeyDictionary[nn.Module, Extension]" = weakref.WeakKeyDictionary()


@dataclass(eq=False)
class Extension:
    spec: str
    method: object
    parts: ModelParts
    route: str                                  # "rotary" or "attention"
    saved_inv_freq: torch.Tensor                # the rotary module's own tensor, put back as is
    saved_scaling: float
    handles: list = field(default_factory=list)
    tracker: PositionTracker | None = None
    base_fn: object = None                      # the model's eager or sdpa attention function
    saved_rope_type: str | None = None          # a longrope config's rotary rope_type, put back

    def attend(self, module, query, key, value, attention_mask, scaling, dropout, **kwargs):
        """Called by every attention layer with UN-rotated query [B,H,Tq,d], key, value
        [B,Hkv,Tk,d] (cache included) and transformers' mask for the underlying implementation."""
        step = self.tracker.step
        if step is None or key.shape[-2] != step.pos_k.shape[-1] \
                or query.shape[-2] != step.pos_q.shape[-1]:
            raise LengenError(
                "lengen.hf: the attention's keys do not match the recorded positions; call the "
                "model itself, with the default dynamic KV cache (DynamicCache)")
        # sequence length for length-dependent frequencies, as HF: largest position + 1, but per
        # sequence, so that a padded sequence gets the frequencies it would get alone
        lengths = step.pos_k.amax(-1) + 1
        if self.method.length_dependent and lengths.numel() > 1 and bool((lengths != lengths[0]).any()):
            rows = [self._attend(module, *(x[b:b + 1] for x in (query, key, value)),
                                 _row(attention_mask, b), step.row(b), int(lengths[b]), scaling,
                                 dropout, **kwargs)[0] for b in range(query.shape[0])]
            return torch.cat(rows), None
        return self._attend(module, query, key, value, attention_mask, step, int(lengths.max()),
                            scaling, dropout, **kwargs)

    def _attend(self, module, query, key, value, attention_mask, step, seq_len, scaling, dropout,
                **kwargs):
        if self.method.remaps:
            return self._remapped(query, key, value, step, scaling, seq_len), None
        query, key = self.method.rotate_qk(query, key, step.pos_q, step.pos_k, seq_len)
        return self.base_fn(module, query, key, value, attention_mask, scaling=scaling,
                            dropout=dropout, **kwargs)

    def _remapped(self, query, key, value, step, scaling, seq_len):
        if step.custom_mask:
            raise LengenError(f"{self.spec}: a ready-made 4D attention mask cannot be combined with "
                              "remapped positions; pass a 2D padding mask")
        pos_k = step.pos_k
        if step.key_valid is not None:
            # the methods are causal in positions: a padding key placed after every query is masked
            pos_k = torch.where(step.key_valid, pos_k, step.pos_q.max() + 1)
        out = self.method.attend(query, key, value, step.pos_q, pos_k, scaling, seq_len)
        return out.transpose(1, 2).contiguous()


def _row(x: torch.Tensor | None, b: int):
    return x if x is None or x.shape[0] == 1 else x[b:b + 1]


def extend(model: nn.Module, method, **options) -> nn.Module:
    """Apply a lengen extrapolation method to a transformers causal LM in place; returns the model.

    `method` is a lengen spec ("yarn", "rerope:window=512+logn", ...); keyword options go to the
    part that takes them (`extend(model, "yarn", factor=4)`). `train_length` (default:
    config.max_position_embeddings), `base` and `rotary_dim` default from the model's config.
    A config asking for a method (rope_type longrope, Qwen2's dual_chunk_attention_config) gives
    that method's options (and, for longrope, train_length) when not passed; a longrope config
    accepts only specs with "longrope".
    The config is not changed (save_pretrained saves the original model). Undo with restore()."""
    if model in _EXTENSIONS:
        raise LengenError(f"the model is already extended with {_EXTENSIONS[model].spec!r}; "
                          "call lengen.hf.restore(model) first")
    options = dict(options)
    parts = inspect_model(model, require_attention=False)
    if parts.required_method and not (isinstance(method, str) and any(
            name == parts.required_method for name, _ in parse_spec(method))):
        raise LengenError(f"the model's config uses rope_type {parts.required_method!r}: only a spec "
                          f"with {parts.required_method!r} (options read from the config) applies to "
                          "it; load the model without rope scaling for other methods")
    train_length = int(options.pop("train_length", None) or parts.original_length or parts.max_positions)
    method_obj, spec = build(method, options, parts.head_dim, parts.rope_base, train_length,
                             defaults=parts.config_methods)
    if method_obj.rope.rotary_dim != parts.head_dim:
        raise LengenError(f"rotary_dim={method_obj.rope.rotary_dim} differs from the model's "
                          f"head_dim {parts.head_dim}; partial rotary is not supported")
    route = "rotary" if is_static_frequency(method_obj) else "attention"
    if route == "attention":
        parts = inspect_model(model, require_attention=True)
    rotary = parts.rotary
    ext = Extension(spec=spec, method=method_obj, parts=parts, route=route,
                    saved_inv_freq=rotary.inv_freq, saved_scaling=rotary.attention_scaling)
    if route == "rotary":
        inv_freq, factor = method_obj.rope_params(method_obj.rope.train_length,
                                                  device=rotary.inv_freq.device)
        rotary.inv_freq = inv_freq.to(rotary.inv_freq.dtype)
        rotary.attention_scaling = factor
    else:
        attn.register()
        _set_implementation(model, attn.NAMES[parts.attn_implementation])   # first: it may refuse
        ext.tracker = PositionTracker()
        ext.base_fn = attn.base_function(parts.attn_implementation, parts.attentions[0])
        rotary.inv_freq = torch.zeros_like(rotary.inv_freq)   # identity rotation: cos 1, sin 0
        rotary.attention_scaling = 1.0
        if getattr(rotary, "rope_type", "default") != "default":
            # a longrope config: transformers would copy its long/short table into inv_freq
            ext.saved_rope_type, rotary.rope_type = rotary.rope_type, "default"
        ext.handles = ext.tracker.attach(parts.base, rotary)
        for module in parts.attentions:
            attn._OWNERS[module] = ext
    _EXTENSIONS[model] = ext
    return model


def restore(model: nn.Module) -> nn.Module:
    """Undo extend(): the model computes exactly what it computed before."""
    ext = _EXTENSIONS.pop(model, None)
    if ext is None:
        raise LengenError("the model is not extended by lengen.hf")
    ext.parts.rotary.inv_freq = ext.saved_inv_freq
    ext.parts.rotary.attention_scaling = ext.saved_scaling
    if ext.saved_rope_type is not None:
        ext.parts.rotary.rope_type = ext.saved_rope_type
    for handle in ext.handles:
        handle.remove()
    for module in ext.parts.attentions:
        attn._OWNERS.pop(module, None)
    if ext.route == "attention":
        _set_implementation(model, ext.parts.attn_implementation)
    return model


def extension_of(model: nn.Module) -> str | None:
    """The spec a model is extended with, or None."""
    ext = _EXTENSIONS.get(model)
    return None if ext is None else ext.spec


def route_of(model: nn.Module) -> str | None:
    """How an extended model runs the method: "rotary" (a frequency method: the rotary table is
    changed, the model's own attention kept) or "attention" (lengen's attention replaces it);
    None when the model is not extended."""
    ext = _EXTENSIONS.get(model)
    return None if ext is None else ext.route


def _set_implementation(model: nn.Module, name: str) -> None:
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:   # older transformers: the config attribute is what the layers read
        model.config._attn_implementation = name
    if model.config._attn_implementation != name:
        raise LengenError(f"{type(model).__name__} refused attn_implementation {name!r}")
