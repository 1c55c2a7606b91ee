"""Method specs and their composition.

Spec syntax:  part ("+" part)*,   part = name [":" key=value ("," key=value)*]
e.g. "rope", "pi:factor=4", "yarn:factor=4,beta_fast=32", "rerope:window=128+logn",
"dynamic:factor=2+self_extend:group=4,window=256+logn". Values parse as int, float, true/false,
none, else string. A spec holds at most one frequency method (rope, pi, ntk, dynamic, yarn,
llama3; default rope), at most one remapping method (rerope, leaky_rerope, self_extend, lambda,
sinks, dca, string, dpe) and at most one logn.
"""

from __future__ import annotations

import re

from lengen.errors import LengenError
from lengen.formatting import parse_value
from lengen.options import check_finite
from lengen.extrapolation.base import ExtrapolationMethod


#: specs meaning "the model as trained" (no extrapolation method), in lm eval and hf eval alike
PLAIN_NAMES = ("rope", "none", "base", "plain")


def is_plain(spec: str) -> bool:
    return spec.strip().lower() in PLAIN_NAMES


def split_methods(text: str) -> list[str]:
    """A list of specs, comma-separated; a piece like "beta_fast=16" (an option without a method name)
    continues the previous method, so "yarn:factor=4,beta_fast=16,pi:factor=4" has two methods."""
    out: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        head = piece.split("+", 1)[0]  # "window=8+logn" continues; "logn+pi:factor=2" does not
        if out and "=" in head and ":" not in head:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


def parse_spec(spec: str) -> list[tuple[str, dict]]:
    """"yarn:factor=4+logn" -> [("yarn", {"factor": 4}), ("logn", {})]."""
    parts = []
    for part in re.split(r"\+(?=\s*[A-Za-z_])", spec.strip()):  # "1e+3" is not a separator
        name, _, rest = part.partition(":")
        name = name.strip()
        if not name:
            raise LengenError(f"empty method name in spec {spec!r}")
        options = {}
        for item in filter(None, (s.strip() for s in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise LengenError(f"bad option {item!r} in spec {spec!r}; expected key=value")
            check_finite(f"option {key.strip()} in spec {spec!r}", value.strip())
            options[key.strip()] = parse_value(value)
        parts.append((name, options))
    return parts


class ComposedMethod(ExtrapolationMethod):
    """One frequency part, an optional remapping part and an optional scale part."""

    def __init__(self, frequency: ExtrapolationMethod, remap: ExtrapolationMethod | None = None,
                 scale: ExtrapolationMethod | None = None):
        super().__init__(frequency.rope)
        self.frequency, self.remap, self.scale = frequency, remap, scale
        self.parts = [p for p in (frequency, remap, scale) if p is not None]
        self.name = "+".join(p.name for p in self.parts)
        self.remaps = remap is not None
        self.length_dependent = frequency.length_dependent

    def rope_params(self, seq_len, device=None):
        return self.frequency.rope_params(seq_len, device)

    def query_scale(self, pos_q):
        return None if self.scale is None else self.scale.query_scale(pos_q)

    def attention(self, q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale):
        if self.remap is None:
            return None
        return self.remap.attention(q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale)

    def relative_positions(self, pos_q, pos_k):
        return (self.remap or self.frequency).relative_positions(pos_q, pos_k)

    def for_layer(self, layer):
        remap = None if self.remap is None else self.remap.for_layer(layer)
        if remap is self.remap:
            return self
        # one composition per layer, kept: every forward asks again
        layers = self.__dict__.setdefault("_layers", {})
        if layer not in layers or layers[layer].remap is not remap:
            layers[layer] = ComposedMethod(self.frequency, remap, self.scale)
        return layers[layer]

    def window_problem(self):
        # a frequency method beside it stretches the trained range by its factor: not checked then
        if self.remap is None or self.frequency.name != "rope":
            return None
        return self.remap.window_problem()

    def __str__(self) -> str:
        return "+".join(str(p) for p in self.parts)

    __repr__ = __str__
