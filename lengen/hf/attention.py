"""The attention functions lengen registers with transformers' AttentionInterface.

With a method that needs positions (remapping, dynamic NTK, log-n), the model's rotary module is
set to the identity (inv_freq = 0, so cos = 1, sin = 0): the attention layer then hands this
function UN-rotated queries and keys, and the KV cache stores un-rotated keys. The Extension
owning the layer (lengen.hf.patch) gives them to the method with their positions: a remapping
method (ReRoPE, Self-Extend, Lambda) computes the attention itself; otherwise the method rotates
q and k and the model's own eager or sdpa function runs with the mask transformers built for it.

One name is registered per underlying implementation (eager, sdpa, lengen_banded), each with
the matching mask function, so a model keeps its mask format.
"""

from __future__ import annotations

import sys
from typing import Callable

import torch

from lengen.errors import LengenError
from lengen.hf import banded
from lengen.hf.extensions import OWNERS

# the model's implementation -> the name the extension registers for it (same mask function)
NAMES = {"eager": "lengen_eager", "sdpa": "lengen_sdpa", banded.NAME: "lengen_banded_extended"}


def eager_function(attention_module: torch.nn.Module) -> Callable:
    """The model's own eager attention (it lives in its modeling file, not in the registry)."""
    fn = getattr(sys.modules.get(type(attention_module).__module__), "eager_attention_forward", None)
    if fn is None:
        # transformers is optional (lengen[hf]): lengen.hf imports it on use
        from transformers.models.llama.modeling_llama import eager_attention_forward as fn
    return fn


def lengen_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    owner = OWNERS.get(module)
    if owner is None:
        raise LengenError("this attention layer is set to a lengen attention function but was not "
                          "extended by lengen.hf (a copy of an extended model?): call "
                          "lengen.hf.restore() on the original and extend the copy")
    return owner.attend(module, query, key, value, attention_mask, scaling, dropout, **kwargs)


def register() -> None:
    """Register lengen_eager / lengen_sdpa (idempotent; names stay registered, harmlessly)."""
    # transformers is optional (lengen[hf]): lengen.hf imports it on use
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    banded.register()   # first: its mask function is one of the bases below
    for base, name in NAMES.items():
        AttentionInterface.register(name, lengen_attention)
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[base])


def base_function(implementation: str, attention_module: torch.nn.Module) -> Callable:
    if implementation == "eager":
        return eager_function(attention_module)
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS   # optional: imported on use

    return ALL_ATTENTION_FUNCTIONS[implementation]
