"""`lengen hf methods`: which lengen methods apply to which layers of a model, read from its config
alone (the model is built on PyTorch's meta device: no weights are read or allocated).

Per layer (lengen.hf.arch.Layer), with L0 the trained length:
  rope               every method, from the layer's own RoPE base;
  sliding / chunked  window <= L0: none (the layer never sees a distance beyond L0 and keeps its
                     own RoPE); window > L0: the frequency methods and log-n, the remapping
                     methods refused (their attention has no window);
  nope               none: no positions to extend; log-n is not applied either (Llama 4's own
                     attention-temperature tuning stays the model's);
  soft-capped        (Gemma 2) the remapping methods are refused (their attention has no
                     soft-capping); frequency methods and log-n run under the model's attention.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from lengen.errors import LengenError
from lengen.extrapolation import METHODS
from lengen.hf.arch import SUPPORTED_MODEL_TYPES, Layer, ModelParts, check_train_length, inspect_model

GROUPS = ("frequency", "remap", "scale")
GROUP_TITLES = {"frequency": "frequency", "remap": "remapping", "scale": "log-n"}


def method_names(group: str) -> list[str]:
    """The registered methods of one kind ("frequency", "remap", "scale"), "rope" left out."""
    return [name for name in METHODS.names() if METHODS.get(name).kind == group and name != "rope"]


def layer_support(layer: Layer, train_length: int) -> dict[str, str]:
    """{group: "yes" or why not} for one layer (the rules in the module docstring)."""
    if layer.kind == "nope":
        return {group: "no (NoPE)" for group in GROUPS}
    if not layer.extended(train_length):
        kept = f"no ({layer.kind} window {layer.window} <= L0)"
        return {group: kept for group in GROUPS}
    remap = "yes"
    if layer.softcap:
        remap = "refused (soft-capping)"
    elif layer.window is not None:
        remap = f"refused (window {layer.window} > L0)"
    return {"frequency": "yes", "remap": remap, "scale": "yes"}


def load_skeleton(source: str, attn: str = "eager", gguf_file: str | None = None) -> nn.Module:
    """A causal LM with the architecture of `source` (a local model folder with config.json, or a
    model_type such as gemma3 with transformers' default config; multimodal configs give their
    text model), on the meta device. `gguf_file`: a GGUF file in the folder, whose metadata
    gives the config (needs the gguf package)."""
    import transformers   # optional (lengen[hf]): imported on use

    path = Path(source)
    if gguf_file and not (path / gguf_file).is_file():
        raise LengenError(f"--gguf-file {gguf_file!r} is not a file in {source}")
    try:
        if path.is_dir():
            extra = {"gguf_file": gguf_file} if gguf_file else {}
            config = transformers.AutoConfig.from_pretrained(path, local_files_only=True, **extra)
        else:
            config = transformers.AutoConfig.for_model(source)
    except (OSError, ValueError, KeyError, ImportError) as e:
        what = f"config ({str(e).splitlines()[0][:200]})" if path.is_dir() \
            else "folder, nor a model_type transformers knows"
        raise LengenError(f"{source!r}: not a readable model {what}; see `lengen hf methods --list`") \
            from None
    config = getattr(config, "text_config", None) or config   # Gemma 3, Llama 4: the text model
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn)


def layer_summary(layer: Layer, train_length: int) -> str:
    """One cell: "all", "none (why)", or the groups that apply and why the others do not."""
    support = layer_support(layer, train_length)
    if all(v == "yes" for v in support.values()):
        return "all"
    if not any(v == "yes" for v in support.values()):
        return "none " + support["frequency"][3:]
    yes = [GROUP_TITLES[g] for g in GROUPS if support[g] == "yes"]
    no = [f"{GROUP_TITLES[g]} {support[g]}" for g in GROUPS if support[g] != "yes"]
    return ", ".join(yes) + "; " + ", ".join(no)


def describe(parts: ModelParts, train_length: int) -> str:
    """The table printed by `lengen hf methods`."""
    rows = [("layer", "kind", "window", "rope base", "softcap", "methods")]
    for layer in parts.layers:
        base = "-" if layer.kind == "nope" else f"{parts.tables[layer.table].base:g}"
        rows.append((str(layer.index), layer.kind, str(layer.window or "-"), base,
                     f"{layer.softcap:g}" if layer.softcap else "-", layer_summary(layer, train_length)))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = [f"{parts.model_type}: {len(parts.layers)} layers, L0 = {train_length}, rotary layout "
             f"{parts.layout}"]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.append("")
    for group in GROUPS:
        where = [str(layer.index) for layer in parts.layers
                 if layer_support(layer, train_length)[group] == "yes"]
        lines.append(f"{GROUP_TITLES[group]} ({', '.join(method_names(group))}): "
                     + (f"layers {', '.join(where)}" if where else "no layer"))
    return "\n".join(lines)


def describe_source(source: str, train_length: int | None = None, gguf_file: str | None = None) -> str:
    check_train_length(train_length)
    parts = inspect_model(load_skeleton(source, gguf_file=gguf_file), require_attention=False)
    return describe(parts, int(train_length or parts.original_length or parts.max_positions))


def supported_list() -> str:
    """`lengen hf methods --list`: the model types and the methods by kind."""
    lines = ["model types: " + ", ".join(sorted(SUPPORTED_MODEL_TYPES))]
    lines += [f"{GROUP_TITLES[g]} methods: {', '.join(method_names(g))}" for g in GROUPS]
    lines.append("per layer: `lengen hf methods MODEL` (a local folder or a model_type)")
    return "\n".join(lines)
