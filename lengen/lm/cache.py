"""The decoder's KV cache: lengen.extrapolation's RawKVCache (UN-rotated keys, so every step can
rotate or remap them for the current query) plus the token ids and rotary parameters it was
filled with.

Why the extra state: un-rotated keys make ONE attention layer exact for every method, but in a
stack, the keys of layer 2 and above are computed from lower layers' outputs, which used the
frequencies of the length at the time. A length-dependent method (dynamic NTK past the training
length) changes the frequencies at every new length, so those cached keys go stale. The model then
re-runs the cached tokens (see DecoderLM.forward): exact, at the cost of the cache's speed-up for
that method only. Position-only methods (pi, yarn, rerope, self_extend, ...) never re-run."""

from __future__ import annotations

import torch

from lengen.extrapolation.cache import RawKVCache


class DecoderCache:
    def __init__(self):
        self.kv = RawKVCache()
        self.ids: torch.Tensor | None = None   # [B, T] tokens seen so far
        self.params = None                     # (inv_freq, attention_factor) the keys were built with
        self.recomputes = 0                    # how often stale keys forced a re-run (for tests/stats)

    def __len__(self) -> int:
        return 0 if self.ids is None else self.ids.shape[1]

    def append_ids(self, ids: torch.Tensor) -> None:
        self.ids = ids if self.ids is None else torch.cat([self.ids, ids], dim=1)

    def reset(self) -> None:
        self.kv.reset()
        self.ids, self.params = None, None

    def stale_for(self, method, new_length: int) -> bool:
        """Whether `method`'s rotary parameters at new_length differ from those the cached keys
        were built with (only length-dependent methods can make them differ)."""
        if method is None or not getattr(method, "length_dependent", False):
            return False
        params = method.params(new_length)
        stale = self.params is not None and not (torch.equal(params[0].cpu(), self.params[0].cpu())
                                                 and params[1] == self.params[1])
        self.params = params
        return stale
