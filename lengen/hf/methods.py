"""Bridge from `extend(model, "yarn", factor=4)` to lengen.extrapolation's method objects."""

from __future__ import annotations

import inspect

import torch

from lengen.errors import LengenError
from lengen.extrapolation import METHODS, ExtrapolationMethod, RopeSpec, build_method, parse_spec
from lengen.extrapolation.base import ROPE_OVERRIDES


def _accepts(name: str, option: str) -> bool:
    if option in ROPE_OVERRIDES:
        return True
    return option in inspect.signature(METHODS.get(name).__init__).parameters


def _format(value, separator: str = "/") -> str:
    """A spec value: lists as "1/2.5/4" (longrope's factors) or with the method's own separator
    (DPE's scales: "4-4-2"), since "," separates options."""
    if isinstance(value, (list, tuple)):
        if separator == "/":
            return "/".join(repr(float(x)) for x in value)
        return separator.join(f"{int(x)}" if float(x).is_integer() else repr(float(x)) for x in value)
    return str(value)


def spec_with_options(spec: str, options: dict, defaults: dict | None = None) -> str:
    """'yarn', {'factor': 4} -> 'yarn:factor=4'. In a combination each option goes to the first
    part that takes it: ('rerope+logn', window=128) -> 'rerope:window=128+logn'. `defaults`
    ({method name: options}, from the model config) fill the options of that part not given."""
    if not isinstance(spec, str) or not spec.strip():
        raise LengenError(f"method must be a spec string such as 'yarn:factor=4', got {spec!r}")
    parts = parse_spec(spec)
    for option, value in options.items():
        target = next((opts for name, opts in parts if _accepts(name, option)), None)
        if target is None:
            raise LengenError(f"no part of {spec!r} takes the option {option!r}")
        target[option] = value
    for name, opts in parts:
        for option, value in (defaults or {}).get(name, {}).items():
            opts.setdefault(option, value)
    return "+".join(name + (":" + ",".join(f"{k}={_format(v, _separator(name))}" for k, v in opts.items())
                            if opts else "") for name, opts in parts)


def _separator(name: str) -> str:
    return getattr(METHODS.get(name), "list_separator", "/") if name in METHODS else "/"


def build(method, options: dict, head_dim: int, rope_base: float, train_length: int,
          defaults: dict | None = None):
    """(method object, spec string) from a spec string, or from a ready ExtrapolationMethod.
    `defaults`: {method name: options} the model config asks for (see lengen.hf.arch)."""
    if isinstance(method, ExtrapolationMethod):
        if options:
            raise LengenError("options cannot be combined with a method object; pass a spec string")
        return method, str(method)
    spec = spec_with_options(method, options, defaults)
    rope = RopeSpec(rotary_dim=head_dim, base=rope_base, train_length=train_length)
    return build_method(spec, rope), spec


def is_static_frequency(method) -> bool:
    """True if the method only sets frequencies, the same at every length (pi, ntk, yarn, llama3):
    they can then live in the model's rotary module, under the model's own attention."""
    if method.remaps or method.length_dependent:
        return False
    return method.query_scale(torch.zeros(1, 1, dtype=torch.long)) is None
