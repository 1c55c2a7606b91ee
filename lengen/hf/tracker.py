"""Positions of queries and keys for each forward pass of a Hugging Face decoder stack.

transformers hands the attention function the new tokens' queries but not the positions of the
cached keys. Remapping methods (ReRoPE, Self-Extend, ...) and dynamic NTK need both. The tracker
reads them where the model itself consumes them, not from one spelling of a forward keyword
(transformers 5.24 renamed `past_key_values` to `cache` and dropped `cache_position`):

  * the queries' positions: the argument the rotary module is called with, `rotary_emb(x,
    positions)`. Every path that makes positions (the caller's position_ids, `cache_position`,
    arange + cache length, generate()'s left-padding cumsum) ends there, and lengen already depends
    on that module (its `inv_freq` is what extend() sets);
  * the KV cache: the `transformers.Cache` object among the decoder stack's inputs or outputs,
    found by type, whatever keyword or output field carries it; its length from the public
    `Cache.get_seq_length()`;
  * the cached keys' positions: recorded per cache object after each pass (so generate(), several
    caches and cropped caches all work);
  * padding: the 2D `attention_mask` argument, found through the forward's signature.

See docs/design.md ("lengen.hf and transformers releases").
"""

from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass

import torch
from torch import nn

from lengen.errors import LengenError


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

    def last_keys(self, n: int) -> "Step":
        """The step as a sliding-window (or chunked) cache layer sees it: only its last n keys
        (transformers' DynamicSlidingWindowLayer keeps the most recent ones)."""
        pick = lambda x: x if x is None else x[..., -n:]  # noqa: E731
        return Step(self.pos_q, pick(self.pos_k), pick(self.key_valid), self.custom_mask)


@dataclass(eq=False)
class _Pass:
    """What the decoder stack received, kept until the rotary module gives the positions."""

    cache: object | None
    past: int
    mask: object


def _cache_class():
    from transformers.cache_utils import Cache   # transformers is optional: imported on use

    return Cache


def find_cache(values, cache_type) -> object | None:
    """The first `cache_type` instance among `values` (a forward's args and kwargs, or a model
    output's fields), or None."""
    return next((v for v in values if isinstance(v, cache_type)), None)


def _output_values(output) -> list:
    if isinstance(output, dict):         # ModelOutput is an OrderedDict of its non-None fields
        return list(output.values())
    if isinstance(output, (tuple, list)):
        return list(output)
    return []


def argument_index(fn, name: str) -> int | None:
    """The position of parameter `name` among fn's positional parameters (None if not one)."""
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return next((i for i, p in enumerate(params) if p.name == name), None)


def _argument(args, kwargs, name: str, index: int | None):
    if name in kwargs:
        return kwargs[name]
    return args[index] if index is not None and len(args) > index else None


class PositionTracker:
    def __init__(self):
        self.step: Step | None = None
        self._pass: _Pass | None = None
        self._cache_positions = weakref.WeakKeyDictionary()   # cache object -> [B|1, T] positions
        self._cache_type = _cache_class()
        self._mask_index: int | None = None
        self._rotary_names: tuple[str, str] = ("x", "position_ids")

    def attach(self, base: nn.Module, rotary: nn.Module) -> list:
        """Register the hooks on the decoder stack and its rotary module; returns handles whose
        remove() undoes it. Refuses a model whose signatures no longer have the two arguments it
        reads, rather than computing with wrong positions."""
        params = list(inspect.signature(base.forward).parameters)
        if "attention_mask" not in params:
            raise LengenError(f"lengen.hf: {type(base).__name__}.forward has no attention_mask "
                              "argument in this transformers release; padded batches cannot be "
                              "tracked (report it with `lengen env`)")
        self._mask_index = argument_index(base.forward, "attention_mask")
        rotary_params = [p for p in inspect.signature(rotary.forward).parameters.values()
                         if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(rotary_params) < 2:
            raise LengenError(f"lengen.hf: {type(rotary).__name__}.forward takes no positions "
                              "argument in this transformers release (report it with `lengen env`)")
        self._rotary_names = (rotary_params[0].name, rotary_params[1].name)
        return [base.register_forward_pre_hook(self._before, with_kwargs=True),
                rotary.register_forward_pre_hook(self._positions, with_kwargs=True),
                base.register_forward_hook(self._after, with_kwargs=True)]

    def _before(self, module, args, kwargs):
        cache = find_cache([*args, *kwargs.values()], self._cache_type)
        past = int(cache.get_seq_length()) if cache is not None else 0
        self._pass = _Pass(cache, past, _argument(args, kwargs, "attention_mask", self._mask_index))
        self.step = None

    def _positions(self, module, args, kwargs):
        if self._pass is None:      # the rotary module called outside the decoder stack
            return
        x = _argument(args, kwargs, self._rotary_names[0], 0)
        pos_q = _argument(args, kwargs, self._rotary_names[1], 1)
        past, cache = self._pass.past, self._pass.cache
        if pos_q is None:   # what the model itself does without positions
            pos_q = torch.arange(past, past + x.shape[1], device=x.device)[None]
        pos_q = pos_q.to(device=x.device, dtype=torch.long)
        if past == 0:
            pos_k = pos_q
        else:
            known = self._cache_positions.get(cache)
            if known is None or known.shape[-1] < past:
                # a cache this tracker has not filled: assume the model's default positions
                known = torch.arange(past, device=x.device)[None]
            known = known[..., :past].to(x.device)   # a cropped cache keeps its first `past` keys
            batch = max(known.shape[0], pos_q.shape[0])
            pos_k = torch.cat([known.expand(batch, -1), pos_q.expand(batch, -1)], dim=-1)
        mask = self._pass.mask
        key_valid, custom = None, False
        if isinstance(mask, torch.Tensor):
            if mask.ndim == 2 and mask.shape[-1] == pos_k.shape[-1]:
                key_valid = None if bool(mask.all()) else mask.to(device=x.device, dtype=torch.bool)
            else:
                custom = True
        self.step = Step(pos_q, pos_k, key_valid, custom)

    def _after(self, module, args, kwargs, output):
        cache = find_cache(_output_values(output), self._cache_type)
        if cache is None and self._pass is not None:
            cache = self._pass.cache
        if cache is not None and self.step is not None:
            self._cache_positions[cache] = self.step.pos_k
        self._pass = None
