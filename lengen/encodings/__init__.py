"""Positional encodings by name. Adding one: a module with a PositionalEncoding subclass and
one `ENCODINGS.add` line here."""

from __future__ import annotations

import inspect

from lengen.encodings.alibi import AlibiEncoding
from lengen.encodings.base import PositionalEncoding
from lengen.encodings.cope import CopeEncoding
from lengen.encodings.fire import FireEncoding, FireSharedEncoding
from lengen.encodings.fope import FopeEncoding
from lengen.encodings.kerple import KerpleLogEncoding, KerplePowerEncoding
from lengen.encodings.layers import LayerPatternEncoding, build_pattern
from lengen.encodings.learned import LearnedEncoding
from lengen.encodings.none import NoEncoding
from lengen.encodings.p_rope import PRopeEncoding
from lengen.encodings.relative import RelativeEncoding
from lengen.encodings.rope import RopeEncoding
from lengen.encodings.sandwich import SandwichEncoding
from lengen.encodings.sincos import SinCosEncoding
from lengen.encodings.t5 import T5Encoding
from lengen.errors import LengenError
from lengen.registry import Registry

# the names papers use for some encodings: suggested when typed, not accepted (a config holds one name)
ENCODINGS: Registry[type[PositionalEncoding]] = Registry("positional encoding", hints={
    "nope": "none", "sinusoidal": "sincos", "rotary": "rope", "partial_rope": "p_rope"})
ENCODINGS.add("none", NoEncoding)
ENCODINGS.add("sincos", SinCosEncoding)
ENCODINGS.add("learned", LearnedEncoding)
ENCODINGS.add("relative", RelativeEncoding)
ENCODINGS.add("alibi", AlibiEncoding)
ENCODINGS.add("rope", RopeEncoding)
ENCODINGS.add("t5", T5Encoding)
ENCODINGS.add("kerple_log", KerpleLogEncoding)
ENCODINGS.add("kerple_power", KerplePowerEncoding)
ENCODINGS.add("sandwich", SandwichEncoding)
ENCODINGS.add("fire", FireEncoding)
ENCODINGS.add("fire_shared", FireSharedEncoding)
ENCODINGS.add("p_rope", PRopeEncoding)
ENCODINGS.add("fope", FopeEncoding)
ENCODINGS.add("cope", CopeEncoding)


def _build_one(cfg, name: str, options: dict) -> PositionalEncoding:
    cls = ENCODINGS.get(name)
    try:
        enc = cls(cfg, **options)
    except TypeError as e:
        valid = [n for n in inspect.signature(cls.__init__).parameters if n not in ("self", "cfg")]
        raise LengenError(f"bad options {options} for encoding {name!r}: {e} "
                          f"(its options: {', '.join(valid) or 'none'})") from None
    except ValueError as e:  # an option's value the encoding refuses (sandwich's odd dim, ...)
        raise LengenError(f"encoding {name!r} with options {options}: {' '.join(str(e).split())}") from None
    enc.registry_name = name
    return enc


def build_encoding(cfg) -> PositionalEncoding:
    """The model's encoding: `cfg.pe` with `cfg.pe_options`, or with `cfg.layer_pe` one
    LayerPatternEncoding that sends each layer to its own (lengen.encodings.layers)."""
    if cfg.layer_pe:
        return build_pattern(cfg, lambda name, options: _build_one(cfg, name, options))
    return _build_one(cfg, cfg.pe, cfg.pe_options)


__all__ = ["ENCODINGS", "LayerPatternEncoding", "PositionalEncoding", "build_encoding"]
