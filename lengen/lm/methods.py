"""From method strings ("rope", "yarn:factor=4", "rerope:window=128+logn") to extrapolation
method objects for one model. The methods (and the spec-list parser split_methods) live in
lengen.extrapolation; this module handles the plain (no-method) case, picks default methods and
refuses methods on non-RoPE models."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lengen.errors import LengenError
from lengen.extrapolation import build_method, is_plain
from lengen.lm.model import pe_description


@dataclass
class ResolvedMethod:
    label: str        # as given (or "base" for plain evaluation of a non-RoPE model)
    method: Any       # an lengen.extrapolation method, or None for the encoding's own hooks


def default_methods(is_rope: bool, train_length: int, max_length: int) -> list[str]:
    """Plain evaluation for non-RoPE models; for RoPE models the main families, frequency methods
    with factor = max_length / train_length and remapping methods with their default windows."""
    if not is_rope:
        return ["base"]
    f = max_length / train_length
    factor = int(f) if f == int(f) else round(f, 3)
    if factor <= 1:
        return ["rope"]
    return ["rope", f"pi:factor={factor}", f"ntk:factor={factor}", f"yarn:factor={factor}", "rerope", "self_extend"]


def sweep_methods(specs: list[str], is_rope: bool) -> list[str]:
    """The methods a sweep evaluates a run with: all of `specs` for a RoPE model; for any other
    model only the plain evaluation ("base"), since every other method needs RoPE."""
    return list(specs) if is_rope else ["base"]


def resolve_methods(specs: list[str], model) -> list[ResolvedMethod]:
    """Build every method up front, so a bad spec fails before any evaluation runs."""
    if not specs:
        raise LengenError("no methods given")
    out = []
    for spec in specs:
        if is_plain(spec):
            out.append(ResolvedMethod(spec if model.is_rope else "base", None))
            continue
        if not model.is_rope:
            raise LengenError(f"method {spec!r} needs a RoPE model, but this run uses {pe_description(model.cfg)}; "
                              f"evaluate it plainly with --methods base")
        out.append(ResolvedMethod(spec, build_method(spec, model.rope_spec())))
    labels = [m.label for m in out]
    if len(set(labels)) != len(labels):
        raise LengenError(f"methods listed twice: {labels}")
    return out
