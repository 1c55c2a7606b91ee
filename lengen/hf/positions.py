"""Positions of queries and keys for each forward pass of a Hugging Face decoder stack.

transformers hands the attention function the queries' `position_ids` but not the positions of
the cached keys. Remapping methods (ReRoPE, Self-Extend, ...) and dynamic NTK need both, so two
ordinary PyTorch forward hooks on the decoder stack record them: before the pass, the positions of
the new tokens and of the keys already in the KV cache; after it, the positions that cache now
holds (kept per cache object, so generate(), several caches and cache crops all work).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(eq=False)
class Step:
    """One forward pass: positions [B|1, Tq] of the new tokens and [B|1, Tk] of all keys;
    key_valid [B, Tk] bool is False on padding (None: no padding), custom_mask is True when the
    caller passed a ready-made 4D mask."""

    pos_q: torch.Tensor
    pos_k: torch.Tensor
    key_valid: torch.Tensor | None = None
    custom_mask: bool = False

    def row(self, b: int) -> "Step":
        pick = lambda x: x if x is None or x.shape[0] == 1 else x[b:b + 1]  # noqa: E731
        return Step(pick(self.pos_q), pick(self.pos_k), pick(self.key_valid), self.custom_mask)


def _first(args, kwargs, name: str, index: int):
    value = kwargs.get(name)
    if value is None and len(args) > index:
        value = args[index]
    return value


class PositionTracker:
    def __init__(self):
        self.step: Step | None = None
        self._cache_positions = weakref.WeakKeyDictionary()   # cache object -> [B|1, T] positions

    def attach(self, base: nn.Module) -> list:
        """Register the hooks on the decoder stack; returns handles whose remove() undoes it."""
        return [base.register_forward_pre_hook(self._before, with_kwargs=True),
                base.register_forward_hook(self._after, with_kwargs=True)]

    def _before(self, module, args, kwargs):
        tokens = _first(args, kwargs, "input_ids", 0)
        if tokens is None:
            tokens = kwargs.get("inputs_embeds")
        length, device = tokens.shape[1], tokens.device
        cache = _first(args, kwargs, "past_key_values", 3)
        past = int(cache.get_seq_length()) if cache is not None else 0
        pos_q = _first(args, kwargs, "position_ids", 2)
        if pos_q is None:   # what the model itself does without position_ids
            pos_q = torch.arange(past, past + length, device=device)[None]
        pos_q = pos_q.to(device=device, dtype=torch.long)
        if past == 0:
            pos_k = pos_q
        else:
            known = self._cache_positions.get(cache)
            if known is None or known.shape[-1] < past:
                # a cache this tracker has not filled: assume the model's default positions
                known = torch.arange(past, device=device)[None]
            known = known[..., :past].to(device)   # a cropped cache keeps its first `past` keys
            batch = max(known.shape[0], pos_q.shape[0])
            pos_k = torch.cat([known.expand(batch, -1), pos_q.expand(batch, -1)], dim=-1)
        mask = _first(args, kwargs, "attention_mask", 1)
        key_valid, custom = None, False
        if isinstance(mask, torch.Tensor):
            if mask.ndim == 2 and mask.shape[-1] == pos_k.shape[-1]:
                key_valid = None if bool(mask.all()) else mask.to(device=device, dtype=torch.bool)
            else:
                custom = True
        self.step = Step(pos_q, pos_k, key_valid, custom)

    def _after(self, module, args, kwargs, output):
        cache = getattr(output, "past_key_values", None)
        if cache is None:
            cache = _first(args, kwargs, "past_key_values", 3)
        if cache is not None and self.step is not None:
            self._cache_positions[cache] = self.step.pos_k
