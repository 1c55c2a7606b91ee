"""NoPE: no positional signal. Meaningful with causal attention (order leaks through the mask);
in a non-causal encoder the model sees a bag of tokens."""

from lengen.encodings.base import PositionalEncoding


class NoEncoding(PositionalEncoding):
    relative = True  # trivially: nothing depends on positions
