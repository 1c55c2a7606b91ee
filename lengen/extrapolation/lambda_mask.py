"""The Lambda-mask: a local window plus a few global tokens at the start (attention sinks).

Keys within the window (0 <= i - j < window) are seen at their true distance; of the keys beyond
it, only the first n_global positions (p_j < n_global) are seen, all other keys are masked.

  lambda (LM-Infinite, Han et al. 2023): global keys beyond the window at the capped distance
      r = window (q rotated by window, keys unrotated). Defaults n_global = 10, window = L0.
  sinks (StreamingLLM, Xiao et al. 2023): the attention of a start+recent cache whose positions
      are re-assigned inside the cache (S = n_global sinks, R = window recent tokens): a sink j
      beyond the window is at distance min(i, R + S - 1) - j. Defaults n_global = 4,
      window = L0 - 4, so no distance exceeds L0 - 1.

      S + R - 1, not S + R: StreamingLLM's code has both. Its generation loop
      (`evict_for_space`) makes room *before* the new token is appended, so the cache of S + R
      entries includes the query, which sits at cache position S + R - 1; its `__call__` evicts
      after, and the next query would sit at S + R. We follow the generation loop, the one its
      perplexity and streaming results come from.

Memory stays that of the full cache here (no eviction); the attention is what matters for eval.
"""

from __future__ import annotations

import torch

from lengen.extrapolation.remap import RemapMethod, constant_positions
from lengen.kernels.remap_tiles import RemapRule


class LambdaMask(RemapMethod):
    name = "lambda"
    default_n_global = 10

    def __init__(self, rope, n_global: int | None = None, window: int | None = None, **blocking):
        super().__init__(rope, **blocking)
        self.n_global = int(self.default_n_global if n_global is None else n_global)
        self.window = int(window) if window is not None else self.default_window(rope)
        if self.window < 1 or self.n_global < 0:
            raise ValueError("window must be >= 1 and n_global >= 0")

    def default_window(self, rope) -> int:
        return rope.train_length

    def largest_window(self) -> int:
        return self.rope.train_length   # far keys at r = window: L0, as LM-Infinite's default

    def far_query_positions(self, pos_q: torch.Tensor) -> torch.Tensor:
        return constant_positions(pos_q, self.window)

    def far_key_mask(self, pos_k: torch.Tensor) -> torch.Tensor:
        return pos_k < self.n_global

    def remap_rule(self) -> RemapRule:
        return RemapRule(self.window, q_mul=0.0, q_add=self.window, k_mode="zero", n_global=self.n_global)


class Sinks(LambdaMask):
    name = "sinks"
    default_n_global = 4

    def default_window(self, rope) -> int:
        return max(1, rope.train_length - self.n_global)

    def largest_window(self) -> int:
        return self.rope.train_length - self.n_global   # largest distance n_global + window - 1 < L0

    def far_query_positions(self, pos_q: torch.Tensor) -> torch.Tensor:
        return pos_q.double().clamp(max=self.window + self.n_global - 1)

    def far_key_positions(self, pos_k: torch.Tensor) -> torch.Tensor:
        return pos_k.double()

    def remap_rule(self) -> RemapRule:
        return RemapRule(self.window, q_max=self.window + self.n_global - 1, n_global=self.n_global)
