"""Positional encodings by name. Adding one: a module with a PositionalEncoding subclass and
one `ENCODINGS.add` line here."""

from __future__ import annotations

import inspect

from lengen.encodings.alibi import AlibiEncoding
from lengen.encodings.base import PositionalEncoding
from lengen.encodings.fire import FireEncoding, FireSharedEncoding
from lengen.encodings.fope import FopeEncoding
from lengen.encodings.kerple import KerpleLogEncoding, KerplePowerEncoding
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

ENCODINGS: Registry[type[PositionalEncoding]] = Registry("positional encoding")
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


def build_encoding(cfg) -> PositionalEncoding:
    cls = ENCODINGS.get(cfg.pe)
    try:
        enc = cls(cfg, **cfg.pe_options)
    except TypeError as e:
        valid = [n for n in inspect.signature(cls.__init__).parameters if n not in ("self", "cfg")]
        raise LengenError(f"bad options {cfg.pe_options} for encoding {cfg.pe!r}: {e} "
                          f"(its options: {', '.join(valid) or 'none'})") from None
    enc.registry_name = cfg.pe
    return enc


__all__ = ["ENCODINGS", "PositionalEncoding", "build_encoding"]
