"""PoSE: positional skip-wise training (Zhu et al., ICLR 2024, arXiv 2309.10400, section 3.2).

Train in a window of L_c tokens (the length the sampler is asked for) with position ids that
reach a target length L_t > L_c: the window is cut into chunks and every chunk after the first
is moved right by a random skip, so the model sees relative distances up to L_t - 1 without
ever holding L_t tokens. In the paper's notation (chunks c_0 .. c_{N-1}):

    l_0 + ... + l_{N-1} = L_c                   chunk lengths ("randomly divide" L_c; see `split`)
    st_i = l_0 + ... + l_{i-1}                  chunk i's first index in the window (st_0 = 0)
    u_0 = 0,  u_i ~ U{u_{i-1}, ..., L_t - L_c}  the skip bias of chunk i (non-decreasing)
    pos(c_i) = {u_i + st_i, ..., u_i + st_i + l_i - 1}

so ids are strictly increasing, start at 0, and the last is at most (L_t - L_c) + L_c - 1 = L_t - 1.

The official code (dwzhu-pku/PoSE, `train_preprocess_function_pose`) has N = 2 and draws the
first chunk as l_0 ~ U{1, ..., floor((L_c + 1) / 2)} (`rt1`), then u_1 ~ U{0, ..., L_t - L_c}
(`rt`). Options:

  target  L_t, the length the model is meant to serve (exclusive bound of the ids); default the
          model's max_position (what the `randomized` sampler spreads over), so a learned table
          of max_position rows always has a row for every id.
  chunks  N (default 2, the official code and every experiment in the paper).
  split   how L_c is divided:
            half     the official code: l_0 ~ U{1..floor((L_c+1)/2)}, l_1 = L_c - l_0 (N = 2 only).
                     The default: it is what the paper's results were trained with, and the
                     second (skipped) chunk always holds at least half of the window.
            uniform  the paper's text ("randomly divide"): every division of L_c into
                     min(N, L_c) non-empty chunks is equally likely (N - 1 distinct cut points
                     drawn uniformly from {1, ..., L_c - 1}).

Only positions come from here. The paper also takes chunk i's *text* from later in the document
(v_i ~ U{v_{i-1}, ..., L_x - L_c}); lengen's training windows stay contiguous (docs/
training_time_methods.md says why). The paper fine-tunes a pretrained RoPE model with position
interpolation (factor L_t / L_c); lengen trains from scratch, so ids up to L_t are used as they
are. Evaluation uses standard positions 0..T-1 at every length (the default test mode of every
sampler but `randomized`).
"""

from __future__ import annotations

import torch

from lengen.errors import LengenError
from lengen.positions.base import PositionSampler

SPLITS = ("half", "uniform")


def _int_option(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise LengenError(f"pose: {name} must be an integer >= {low}, got {value!r}")
    return value


class PoSEPositions(PositionSampler):
    def __init__(self, max_position: int = 2048, target: int | None = None, chunks: int = 2,
                 split: str = "half"):
        super().__init__(max_position=max_position)
        self.target = self.max_position if target is None else _int_option("target", target, 1)
        self.chunks = _int_option("chunks", chunks, 1)
        if split not in SPLITS:
            raise LengenError(f"pose: split must be one of {', '.join(SPLITS)}, got {split!r}")
        if split == "half" and self.chunks != 2:
            raise LengenError(f"pose: split=half is the official code's rule for 2 chunks; with "
                              f"chunks={self.chunks} use split=uniform")
        self.split = split

    def position_bound(self, length: int) -> float:
        return self.target  # every id <= L_t - 1

    def check_length(self, length: int) -> None:
        if length > self.target:
            raise LengenError(f"pose: sequences of {length} tokens exceed the target length {self.target} "
                              "(PoSE trains in a window shorter than the length it serves): raise "
                              "--position-option target=L_t or lower the training length")

    def chunk_lengths(self, length: int, generator: torch.Generator | None) -> list[int]:
        """l_0, ..., l_{n-1} with sum `length` (L_c)."""
        if self.split == "half":
            first = int(torch.randint(1, (length + 1) // 2 + 1, (1,), generator=generator))  # code's rt1
            return [first, length - first] if first < length else [first]
        n = min(self.chunks, length)
        cuts = (torch.randperm(length - 1, generator=generator)[: n - 1] + 1).sort().values.tolist()
        edges = [0, *cuts, length]
        return [b - a for a, b in zip(edges, edges[1:])]

    def sample(self, length, generator=None):
        self.check_length(length)
        lengths = self.chunk_lengths(length, generator)
        top = self.target - length                       # L_t - L_c: the largest skip
        skips, u = [0], 0                                # u_0 = 0
        for _ in lengths[1:]:
            u = int(torch.randint(u, top + 1, (1,), generator=generator))  # u_i ~ U{u_{i-1}..L_t-L_c}
            skips.append(u)
        # chunk i: u_i + st_i + (0 .. l_i - 1), i.e. index k of the window gets k + u_(its chunk)
        bias = torch.repeat_interleave(torch.tensor(skips, dtype=torch.int64), torch.tensor(lengths))
        return (torch.arange(length, dtype=torch.int64) + bias).unsqueeze(0)
