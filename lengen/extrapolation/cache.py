"""A KV cache of UN-rotated keys, for incremental decoding with any extrapolation method.

Why un-rotated: the remapping methods rotate keys by a position that depends on the query
(ReRoPE's far keys are unrotated, Self-Extend's are grouped), and dynamic NTK changes every
frequency when the total length grows. Keeping raw keys with their positions and letting
`method.attend` rotate them at each step makes one attention layer decode token t exactly as a
full forward over the first t + 1 tokens, for every method (tested). The cost is one rotation of
the cached keys per step, O(T d), against the O(T d) attention itself.

In a stack of layers, the keys of layer 2 and above are computed from lower layers' outputs. For
a length-dependent method (`method.length_dependent`, i.e. dynamic NTK past the training length)
those outputs were computed with the frequencies of an earlier length, so exact equality with a
full forward needs the cached tokens re-run whenever the frequencies change (lengen.lm does
that); every other method decodes incrementally and exactly.

Use per layer:   k_all, v_all, pos_all = cache.update(layer, k, v, pos)
                 out = method.attend(q, k_all, v_all, pos, pos_all, scale)
with k, v [B, Hk, t, d] of the new tokens (before rotation) and pos [B|1, t] their positions.
"""

from __future__ import annotations

import torch


class RawKVCache:
    """Per-layer growing buffers (capacity doubles, so appending is amortized O(1) per token)."""

    def __init__(self):
        self._layers: dict[int, list] = {}  # layer -> [k_buf, v_buf, pos_buf, length]

    def __len__(self) -> int:
        """Number of cached tokens (of layer 0, or of any layer if 0 is absent)."""
        if not self._layers:
            return 0
        return self._layers.get(0, next(iter(self._layers.values())))[3]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor):
        """Append k, v [B, Hk, t, d] and pos [B|1, t]; return all cached (k, v, pos) as views."""
        t = k.shape[-2]
        if layer not in self._layers:
            cap = max(16, 2 * t)
            self._layers[layer] = [
                k.new_empty(*k.shape[:-2], cap, k.shape[-1]),
                v.new_empty(*v.shape[:-2], cap, v.shape[-1]),
                pos.new_empty(*pos.shape[:-1], cap),
                0,
            ]
        entry = self._layers[layer]
        n = entry[3]
        if n + t > entry[0].shape[-2]:
            cap = 2 * (n + t)
            entry[0] = _grow(entry[0], n, cap, dim=-2)
            entry[1] = _grow(entry[1], n, cap, dim=-2)
            entry[2] = _grow(entry[2], n, cap, dim=-1)
        entry[0][..., n:n + t, :] = k
        entry[1][..., n:n + t, :] = v
        entry[2][..., n:n + t] = pos
        entry[3] = n + t
        return entry[0][..., :n + t, :], entry[1][..., :n + t, :], entry[2][..., :n + t]

    def reset(self) -> None:
        self._layers.clear()


def _grow(buf: torch.Tensor, used: int, cap: int, dim: int) -> torch.Tensor:
    shape = list(buf.shape)
    shape[dim] = cap
    new = buf.new_empty(shape)
    new.narrow(dim, 0, used).copy_(buf.narrow(dim, 0, used))
    return new
