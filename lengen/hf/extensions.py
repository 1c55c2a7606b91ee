"""Which models lengen.hf has extended, and which extension drives each attention layer: the
registry that extend() and restore() (lengen.hf.patch) write, that lengen's attention function
(lengen.hf.attention) reads to find a layer's extension, and that lengen.hf.banded.use reads to
refuse an extended model. A floor below those three, so that none of them imports another for it."""

from __future__ import annotations

import weakref
from typing import Any

from torch import nn

# model -> the Extension applied to it (lengen.hf.patch)
EXTENDED: "weakref.WeakKeyDictionary[nn.Module, Any]" = weakref.WeakKeyDictionary()
# attention module -> the Extension driving it
OWNERS: "weakref.WeakKeyDictionary[nn.Module, Any]" = weakref.WeakKeyDictionary()


def extension_of(model: nn.Module) -> str | None:
    """The spec a model is extended with, or None."""
    ext = EXTENDED.get(model)
    return None if ext is None else ext.spec


def route_of(model: nn.Module) -> str | None:
    """How an extended model runs the method: "rotary" (a frequency method: the rotary table is
    changed, the model's own attention kept) or "attention" (lengen's attention replaces it);
    None when the model is not extended."""
    ext = EXTENDED.get(model)
    return None if ext is None else ext.route
