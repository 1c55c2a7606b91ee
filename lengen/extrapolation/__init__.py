"""Training-free length extrapolation for RoPE attention: frequency methods (pi, ntk, dynamic,
yarn, llama3, longrope), position-remapping attention (rerope, leaky_rerope, self_extend, lambda,
sinks, dca, string, dpe) and
log-n scaling, composable with "+". None changes weights.

    from lengen.extrapolation import RopeSpec, build_method
    method = build_method("yarn:factor=4+logn", RopeSpec(rotary_dim=64, base=10000, train_length=2048))
    out = method.attend(q, k, v, pos_q, pos_k, scale)        # UN-rotated q, k; causal by position

Adding a method: a module with an ExtrapolationMethod subclass and one METHODS.add line here.
See docs/training_free.md for formulas, the blockwise attention and the KV-cache design.
"""

from __future__ import annotations

from lengen.errors import LengenError
from lengen.extrapolation.base import ExtrapolationMethod, RopeSpec, causal_attention, sequence_length
from lengen.extrapolation.cache import RawKVCache
from lengen.extrapolation.compose import PLAIN_NAMES, ComposedMethod, is_plain, parse_spec, split_methods
from lengen.extrapolation.dca import DualChunk
from lengen.extrapolation.dope import Dope
from lengen.extrapolation.dpe import Dpe
from lengen.extrapolation.dynamic import DynamicNtk
from lengen.extrapolation.lambda_mask import LambdaMask, Sinks
from lengen.extrapolation.leaky_rerope import LeakyReRope
from lengen.extrapolation.llama3 import Llama3
from lengen.extrapolation.logn import LogN
from lengen.extrapolation.longrope import LongRope
from lengen.extrapolation.ntk import NtkAware
from lengen.extrapolation.pi import PositionInterpolation
from lengen.extrapolation.plain import PlainRope
from lengen.extrapolation.remap import RemapMethod
from lengen.extrapolation.rerope import ReRope
from lengen.extrapolation.self_extend import SelfExtend
from lengen.extrapolation.string_method import String
from lengen.extrapolation.yarn import Yarn
from lengen.registry import Registry

METHODS: Registry[type[ExtrapolationMethod]] = Registry("extrapolation method")
METHODS.add("rope", PlainRope)
METHODS.add("pi", PositionInterpolation)
METHODS.add("ntk", NtkAware)
METHODS.add("dynamic", DynamicNtk)
METHODS.add("yarn", Yarn)
METHODS.add("llama3", Llama3)
METHODS.add("longrope", LongRope)
METHODS.add("rerope", ReRope)
METHODS.add("leaky_rerope", LeakyReRope)
METHODS.add("self_extend", SelfExtend)
METHODS.add("lambda", LambdaMask)
METHODS.add("sinks", Sinks)
METHODS.add("dca", DualChunk)
METHODS.add("string", String)
METHODS.add("dpe", Dpe)
METHODS.add("dope", Dope)
METHODS.add("logn", LogN)


def build_method(spec: str | None, rope: RopeSpec) -> ExtrapolationMethod:
    """A method from a spec such as "rerope:window=128+logn" (syntax: lengen.extrapolation.compose).
    Options not given default from the RopeSpec (rotary dim, base, training length)."""
    parts = [METHODS.get(name).from_options(rope, opts) for name, opts in parse_spec(spec or "rope")]
    by_kind: dict[str, ExtrapolationMethod] = {}
    for part in parts:
        if part.kind in by_kind:
            raise LengenError(
                f"spec {spec!r} has two {part.kind} methods ({by_kind[part.kind].name}, {part.name}); "
                "combine at most one frequency, one remapping method and logn"
            )
        by_kind[part.kind] = part
    if len(parts) == 1:
        return parts[0]
    frequency = by_kind.get("frequency") or PlainRope(rope)
    return ComposedMethod(frequency, by_kind.get("remap"), by_kind.get("scale"))


def check_window(spec: str, rope: RopeSpec) -> None:
    """Refuse (LengenError, one line naming the spec) a spec whose remapping window is at or past
    what a model trained on rope.train_length tokens saw (ExtrapolationMethod.window_problem)."""
    problem = build_method(spec, rope).window_problem()
    if problem:
        raise LengenError(f"{spec}: {problem}")


__all__ = [
    "METHODS", "PLAIN_NAMES", "ComposedMethod", "ExtrapolationMethod", "RawKVCache", "RemapMethod", "RopeSpec",
    "build_method", "causal_attention", "check_window", "is_plain", "parse_spec", "sequence_length", "split_methods",
]
