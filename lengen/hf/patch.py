"""extend(model, method, **options) and restore(model): apply a lengen extrapolation method in place
to a Hugging Face causal LM, and undo it exactly.

Two routes, both through transformers' own extension points (no forward is replaced):
  * "rotary": a method that only changes frequencies, the same at every length (pi, ntk, yarn,
    llama3), writes its inv_freq and attention factor into the model's rotary module. The model's
    attention (eager, sdpa, flash, ...) runs unchanged: this is what transformers itself does for
    a `rope_parameters` config.
  * "attention": every other method (dynamic, remapping, log-n) sets the rotary module to the
    identity, and a lengen attention function registered with AttentionInterface applies the
    method to un-rotated q/k at their positions (lengen.hf.attention, lengen.hf.tracker). The
    KV cache then holds un-rotated keys, so decoding with the cache gives the logits of full
    forward passes. Dynamic NTK re-rotates every cached key at the current length's frequencies
    (HF's own dynamic mixes bases in its cache, transformers#25104); its cached keys and values
    of layers >= 2 still come from hidden states computed at shorter lengths, which no cache can
    avoid, so there only the first layer equals a full forward exactly.

Per layer (lengen.hf.arch.Layer): a method applies to the layers `Layer.extended` names (global
RoPE layers, windowed layers whose window exceeds L0), built from each layer's own RoPE base; a
rotary table is rewritten only if every RoPE layer reading it is extended, else the attention
route runs and gives each layer its LayerPlan.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from lengen.errors import LengenError
from lengen.hf import attention as attn
from lengen.hf.arch import ModelParts, inspect_model
from lengen.hf.calibration import calibrate
from lengen.hf.extensions import EXTENDED, OWNERS
from lengen.hf.methods import build, is_static_frequency
from lengen.hf.tracker import PositionTracker
from lengen.extrapolation import ExtrapolationMethod, RopeSpec, parse_spec
from lengen.extrapolation.base import sequence_lengths


@dataclass(eq=False)
class LayerPlan:
    """What lengen does in one attention layer under the "attention" route:
    "method": apply the extension method (built from this layer's RoPE base);
    "plain":  ordinary RoPE at the layer's own base (its rotary table is shared with extended
              layers and set to the identity, but this layer is not extended: a sliding window
              within the trained length);
    "pass":   nothing: the model's own attention as it is (NoPE layers, layers whose own table is
              untouched)."""

    action: str
    method: object = None


@dataclass(eq=False)
class Extension:
    spec: str
    method: object                              # the method of the global RoPE layers
    parts: ModelParts
    route: str                                  # "rotary" or "attention"
    saved: dict = field(default_factory=dict)   # table key -> (inv_freq, attention_scaling), put back
    plans: dict = field(default_factory=dict)   # layer index -> LayerPlan ("attention" route)
    handles: list = field(default_factory=list)
    tracker: PositionTracker | None = None
    base_fn: object = None                      # the model's eager or sdpa attention function
    saved_rope_type: str | None = None          # a longrope config's rotary rope_type, put back
    observer: object = None                     # observe(): called with each layer's un-rotated q, k

    def attend(self, module, query, key, value, attention_mask, scaling, dropout, **kwargs):
        """Called by every attention layer with query [B,H,Tq,d], key, value [B,Hkv,Tk,d] (cache
        included; un-rotated where the layer's table is the identity) and transformers' mask
        for the underlying implementation (the layer's own: sliding, chunked or causal)."""
        plan = self.plans[module.layer_idx]
        if plan.action == "pass":
            return self.base_fn(module, query, key, value, attention_mask, scaling=scaling,
                                dropout=dropout, **kwargs)
        step = self.tracker.step
        if step is None or query.shape[-2] != step.pos_q.shape[-1] or key.shape[-2] > step.pos_k.shape[-1] \
                or (key.shape[-2] < step.pos_k.shape[-1] and not kwargs.get("sliding_window")
                    and self.parts.layers[module.layer_idx].window is None):
            raise LengenError(
                "lengen.hf: the attention's keys do not match the recorded positions; call the "
                "model itself, with the default dynamic KV cache (DynamicCache)")
        if key.shape[-2] < step.pos_k.shape[-1]:
            # a sliding-window / chunked cache layer keeps only its last keys
            step = step.last_keys(key.shape[-2])
        method = plan.method
        # per sequence, so that a padded sequence gets the frequencies it would get alone
        lengths = sequence_lengths(step.pos_k)
        if method.length_dependent and lengths.numel() > 1 and bool((lengths != lengths[0]).any()):
            rows = [self._attend(method, module, *(x[b:b + 1] for x in (query, key, value)),
                                 _row(attention_mask, b), step.row(b), int(lengths[b]), scaling,
                                 dropout, **kwargs)[0] for b in range(query.shape[0])]
            return torch.cat(rows), None
        return self._attend(method, module, query, key, value, attention_mask, step,
                            int(lengths.max()), scaling, dropout, **kwargs)

    def _attend(self, method, module, query, key, value, attention_mask, step, seq_len, scaling,
                dropout, **kwargs):
        if getattr(module, "qk_norm", None) is not None and scaling is not None:
            # Llama 4 L2-normalises q and k after RoPE, which cancels an attention factor (yarn's)
            # on the model's own (rotary) route; here q, k arrive normalised, so divide it out
            factor = float(method.params(seq_len, query.device)[1])
            scaling = scaling / factor ** 2
        if self.parts.layout == "interleaved":
            # pairs (2i, 2i+1) -> channels (i, i + d/2): the half-split layout the methods rotate;
            # q.k is unchanged by permuting the channels of both alike
            query, key = _half_split(query), _half_split(key)
        if self.observer is not None:
            self.observer(module.layer_idx, query, key)
        if method.remaps:
            return self._remapped(method, query, key, value, step, scaling, seq_len), None
        query, key = method.rotate_qk(query, key, step.pos_q, step.pos_k, seq_len)
        return self.base_fn(module, query, key, value, attention_mask, scaling=scaling,
                            dropout=dropout, **kwargs)

    def _remapped(self, method, query, key, value, step, scaling, seq_len):
        if step.custom_mask:
            raise LengenError(f"{self.spec}: a ready-made 4D attention mask cannot be combined with "
                              "remapped positions; pass a 2D padding mask")
        pos_k = step.pos_k
        if step.key_valid is not None:
            # the methods are causal in positions: a padding key placed after every query is masked
            pos_k = torch.where(step.key_valid, pos_k, step.pos_q.max() + 1)
        out = method.attend(query, key, value, step.pos_q, pos_k, scaling, seq_len)
        return out.transpose(1, 2).contiguous()


def _half_split(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)


def _row(x, b: int):
    """Row b of a mask; None and lengen.hf.banded's Band (no batch axis) are every row's."""
    return x if not torch.is_tensor(x) or x.shape[0] == 1 else x[b:b + 1]


def _methods_by_table(method, options, parts, train_length, extended) -> tuple[dict, str]:
    """({table key: method object built from that table's RoPE base}, spec) for the tables of the
    extended layers: per-layer-type bases are each scaled from their own."""
    keys = list(dict.fromkeys(layer.table for layer in extended))
    built, spec = {}, None
    for key in keys or [next(iter(parts.tables))]:
        base = parts.tables[key].base
        if isinstance(method, ExtrapolationMethod) and len(keys) > 1 \
                and len({parts.tables[k].base for k in keys}) > 1:
            raise LengenError("the model's extended layers have several RoPE bases: pass a spec "
                              "string (a method object carries one base)")
        built[key], spec = build(method, options, parts.head_dim, base, train_length,
                                 defaults=parts.config_methods)
    return built, spec


def extend(model: nn.Module, method, **options) -> nn.Module:
    """Apply a lengen extrapolation method to a transformers causal LM in place; returns the model.

    `method` is a lengen spec ("yarn", "rerope:window=512+logn", ...); keyword options go to the
    part that takes them (`extend(model, "yarn", factor=4)`). `train_length` (default:
    config.max_position_embeddings), `base` and `rotary_dim` default from the model's config.
    A config asking for a method (rope_type longrope, Qwen2's dual_chunk_attention_config) gives
    that method's options (and, for longrope, train_length) when not passed; a longrope config
    accepts only specs with "longrope".
    Hybrid-layer models: the method applies to the global RoPE layers (each layer type from its
    own RoPE base) and to windowed layers whose window exceeds train_length; sliding / chunked
    layers within it and NoPE layers stay the model's own (docs/huggingface.md).
    DPE with topk below every pair first calibrates its key pairs, DoPE its heads
    (lengen.hf.calibration): on
    `calibration=` token ids [N, T], a tokenizer (over the standard library's text) or a
    lengen.hf.calibration.CalibrationText (a tokenizer and a text), else the model folder's
    tokenizer over the standard library; cached (other methods ignore `calibration`).
    The config is not changed (save_pretrained saves the original model). Undo with restore()."""
    return _extend(model, method, dict(options))


@contextmanager
def observe(model: nn.Module, observer, method: str = "rope"):
    """The model as it is (plain RoPE, or `method`, on lengen's attention route) within the block, with
    observer(layer_index, q, k) called by every RoPE layer lengen's attention runs, with its
    UN-rotated q [B, H, Tq, d] and k [B, Hkv, Tk, d] (the cache included) in the half-split
    channel layout (pair j = channels j, j + d/2, whatever the model's own layout); restored
    after. The capture behind lengen.hf.calibration."""
    parts = inspect_model(model, require_attention=True)
    _extend(model, parts.required_method or method, {}, observer=observer)
    try:
        yield model
    finally:
        restore(model)


@torch.no_grad()
def capture_qk(model: nn.Module, ids: torch.Tensor, reducer, batch_size: int = 1, method: str = "rope") -> None:
    """Run `model` (a transformers causal LM, not extended) on token ids [N, T], batch_size
    sequences per forward, without gradients or KV cache, calling reducer(layer_index, q, k) in
    every RoPE layer with its un-rotated q [B, H, T, d] and k [B, Hkv, T, d] (half-split channel
    layout: pair j = channels j and j + d/2). NoPE layers are not reported. The model is left
    as it was; `method` (a spec without calibration) runs in the pass instead of plain RoPE.
    The calibration pass of DPE and DoPE (lengen.hf.calibration)."""
    device = next(model.parameters()).device
    with observe(model, reducer, method):
        for chunk in ids.split(batch_size):
            model(chunk.to(device), use_cache=False)


def _extend(model: nn.Module, method, options: dict, observer=None) -> nn.Module:
    if model in EXTENDED:
        raise LengenError(f"the model is already extended with {EXTENDED[model].spec!r}; "
                          "call lengen.hf.restore(model) first")
    calibration = options.pop("calibration", None)
    parts = inspect_model(model, require_attention=False)
    if parts.required_method and not (isinstance(method, str) and any(
            name == parts.required_method for name, _ in parse_spec(method))):
        raise LengenError(f"the model's config uses rope_type {parts.required_method!r}: only a spec "
                          f"with {parts.required_method!r} (options read from the config) applies to "
                          "it; load the model without rope scaling for other methods")
    train_length = int(options.pop("train_length", None) or parts.original_length or parts.max_positions)
    extended = [layer for layer in parts.layers if layer.extended(train_length)]
    methods, spec = _methods_by_table(method, options, parts, train_length, extended)
    method_obj = methods.get("full_attention", next(iter(methods.values())))
    if method_obj.rope.rotary_dim != parts.head_dim:
        raise LengenError(f"rotary_dim={method_obj.rope.rotary_dim} differs from the model's "
                          f"head_dim {parts.head_dim}; partial rotary is not supported")
    touched = {layer.table for layer in extended}
    # a table may only be rewritten if every RoPE layer reading it is extended
    shared = any(layer.table in touched and not layer.extended(train_length)
                 for layer in parts.layers if layer.kind != "nope")
    route = "rotary" if is_static_frequency(method_obj) and not shared and observer is None else "attention"
    if route == "attention":
        parts = inspect_model(model, require_attention=True)
        extended = [layer for layer in parts.layers if layer.extended(train_length)]
        _check_layers(spec, method_obj, extended)
    # after every check, before the model is touched
    calibrated = [part for part in (getattr(m, "remap", m) for m in methods.values())
                  if getattr(part, "needs_calibration", False)]
    if calibrated:
        calibrate(model, calibrated, capture_qk, calibration, train_length)
    rotary = parts.rotary
    ext = Extension(spec=spec, method=method_obj, parts=parts, route=route, observer=observer,
                    saved={key: (parts.tables[key].inv_freq, parts.tables[key].attention_scaling)
                           for key in touched})
    if route == "rotary":
        for key in touched:
            table = parts.tables[key]
            inv_freq, factor = methods[key].rope_params(methods[key].rope.train_length,
                                                       device=table.inv_freq.device)
            table.set(inv_freq.to(table.inv_freq.dtype), factor)
    else:
        attn.register()
        _set_implementation(model, attn.NAMES[parts.attn_implementation])   # first: it may refuse
        ext.tracker = PositionTracker()
        ext.base_fn = attn.base_function(parts.attn_implementation, parts.attentions[0])
        for key in touched:   # identity rotation: cos 1, sin 0
            table = parts.tables[key]
            table.set(torch.zeros_like(table.inv_freq), 1.0)
        if isinstance(getattr(rotary, "rope_type", "default"), str) \
                and getattr(rotary, "rope_type", "default") != "default":
            # a longrope config: transformers would copy its long/short table into inv_freq
            ext.saved_rope_type, rotary.rope_type = rotary.rope_type, "default"
        for layer in parts.layers:
            if layer.extended(train_length):
                ext.plans[layer.index] = LayerPlan("method", methods[layer.table].for_layer(layer.index))
            elif layer.kind != "nope" and layer.table in touched:
                ext.plans[layer.index] = LayerPlan("plain", ExtrapolationMethod(RopeSpec(
                    rotary_dim=parts.head_dim, base=parts.tables[layer.table].base,
                    train_length=train_length)))
            else:
                ext.plans[layer.index] = LayerPlan("pass")
        ext.handles = ext.tracker.attach(parts.base, rotary)
        for module in parts.attentions:
            OWNERS[module] = ext
    EXTENDED[model] = ext
    return model


def _check_layers(spec: str, method, extended: list) -> None:
    """Refuse what lengen's own attention (the remapping methods) cannot keep of a layer."""
    if not method.remaps:
        return
    for layer in extended:
        if layer.softcap:
            raise LengenError(f"{spec}: layer {layer.index} soft-caps its attention logits "
                              f"(attn_logit_softcapping={layer.softcap}, Gemma 2); the remapping "
                              "methods compute attention themselves without it: use a frequency "
                              "method (pi, ntk, dynamic, yarn, llama3) on this model")
        if layer.window is not None:
            raise LengenError(f"{spec}: layer {layer.index} is a {layer.kind} layer whose window "
                              f"({layer.window}) exceeds train_length; remapping methods do not "
                              "window their attention: use a frequency method, or a train_length "
                              ">= the window")


def restore(model: nn.Module) -> nn.Module:
    """Undo extend(): the model computes exactly what it computed before."""
    ext = EXTENDED.pop(model, None)
    if ext is None:
        raise LengenError("the model is not extended by lengen.hf")
    for key, (inv_freq, scaling) in ext.saved.items():
        ext.parts.tables[key].set(inv_freq, scaling)
    if ext.saved_rope_type is not None:
        ext.parts.rotary.rope_type = ext.saved_rope_type
    for handle in ext.handles:
        handle.remove()
    for module in ext.parts.attentions:
        OWNERS.pop(module, None)
    if ext.route == "attention":
        _set_implementation(model, ext.parts.attn_implementation)
    return model


def _set_implementation(model: nn.Module, name: str) -> None:
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:   # older transformers: the config attribute is what the layers read
        model.config._attn_implementation = name
    if model.config._attn_implementation != name:
        raise LengenError(f"{type(model).__name__} refused attn_implementation {name!r}")
