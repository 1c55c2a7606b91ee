"""The shared base of methods that remap relative positions (ReRoPE, Leaky ReRoPE, Self-Extend,
Lambda-mask / sinks).

Each is described by four things (delta = p_i - p_j, query position p_i, key position p_j):
  window            pairs with 0 <= delta < window keep their true distance (ordinary RoPE);
  far_query_positions(p_i), far_key_positions(p_j)
                    pairs with delta >= window are scored at relative position f_q(p_i) - f_k(p_j),
                    i.e. q rotated by f_q and k by f_k (f_k = None: keys unrotated, position 0;
                    f_q may be a [B|1, 1] column when it is the same for every query);
  far_key_mask(p_j) which keys may be attended from beyond the window (None: all of them).
`relative_positions` gives the resulting map r(i, j) (NaN where masked) and `attention` runs the
blockwise two-piece attention of `lengen.extrapolation.blockwise`, never building T x T scores;
on CUDA (`lengen.kernels.flex_remap.choose`) the one-pass Triton kernel of `remap_rule`, or the
two FlexAttention passes described by `flex_pieces`, the blockwise path staying the fallback.

Because the rotation is applied inside attention, the KV cache must hold UN-rotated keys (see
`lengen.extrapolation.cache`).
"""

from __future__ import annotations

import torch

from lengen.encodings.rope import apply_rotary, rope_cos_sin
from lengen.extrapolation.base import ExtrapolationMethod, repeat_kv
from lengen.extrapolation.blockwise import two_piece_attention
from lengen.kernels import flex_remap
from lengen.kernels.flex_remap import TwoPiece
from lengen.kernels.remap_tiles import RemapRule


def constant_positions(pos: torch.Tensor, value: float) -> torch.Tensor:
    """A [B|1, 1] column of `value`: broadcasts over the queries (one cos/sin row to compute)."""
    return torch.full((*pos.shape[:-1], 1), float(value), dtype=torch.float64, device=pos.device)


def rotate(x: torch.Tensor, pos: torch.Tensor | None, inv_freq: torch.Tensor) -> torch.Tensor:
    """x rotated by RoPE at positions pos [B|1, T]; x itself where pos is None (position 0)."""
    return x if pos is None else apply_rotary(x, *rope_cos_sin(pos.to(x.device), inv_freq))


class RemapMethod(ExtrapolationMethod):
    kind = "remap"
    remaps = True
    window: float

    def __init__(self, rope, block: int = 256):
        super().__init__(rope)
        self.block = int(block)  # query / key block size of the blockwise attention
        if self.block < 1:
            raise ValueError("block must be >= 1")

    def far_query_positions(self, pos_q: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # the option holding the near window, and the largest window that leaves room for the far pairs
    # (Leaky ReRoPE, Self-Extend: w < L0, else far pairs start at r = L0 and grow from there)
    window_option = "window"

    def largest_window(self) -> int:
        return self.rope.train_length - 1

    def window_problem(self) -> str | None:
        L0, limit = self.rope.train_length, self.largest_window()
        if self.window <= limit:
            return None
        which = "pairs within it keep" if self.window > L0 else "the pairs beyond it are placed at"
        return (f"the {self.window_option} ({self.window:g}) must be <= {limit} for a model trained on {L0} "
                f"tokens: {which} distances the model never saw, so the method cannot bring longer inputs "
                f"into the trained range; give {self.window_option} <= {limit}, or leave it out for the default")

    def far_key_positions(self, pos_k: torch.Tensor) -> torch.Tensor | None:
        return None

    def far_key_mask(self, pos_k: torch.Tensor) -> torch.Tensor | None:
        return None

    def remap_rule(self) -> RemapRule | None:
        """The rule above as data for the one-pass Triton kernel (lengen.kernels.triton_remap);
        None: the method has none, the flex / blockwise paths run."""
        return None

    def kernel_rule(self, pos_q, pos_k, attention_factor, scale) -> tuple[RemapRule, float]:
        """(rule, logit scale) the Triton kernel runs: attention_factor multiplies cos and sin of
        q and k, so its square joins the scale."""
        return self.remap_rule(), scale * attention_factor ** 2

    def relative_positions(self, pos_q: torch.Tensor, pos_k: torch.Tensor) -> torch.Tensor:
        """r(i, j) [B|1, Tq, Tk] float64 as the attention sees it; NaN where the pair is masked."""
        pq, pk = pos_q.double(), pos_k.double()
        delta = pq[:, :, None] - pk[:, None, :]
        fq = self.far_query_positions(pq)
        fk = self.far_key_positions(pk)
        far_r = fq[:, :, None] - (0.0 if fk is None else fk[:, None, :])
        near = (delta >= 0) & (delta < self.window)
        far = delta >= self.window
        mask = self.far_key_mask(pk)
        if mask is not None:
            far = far & mask[:, None, :]
        r = torch.where(near, delta, far_r)
        return r.masked_fill(~(near | far), float("nan"))

    def far_rotated(self, q, k, pos_q, pos_k, inv_freq):
        """(q, k) as far pairs score them: q rotated by f_q(p_i), k by f_k(p_j) (unrotated where
        f_k is None). DPE overrides it: a position per frequency pair and head."""
        return rotate(q, self.far_query_positions(pos_q), inv_freq), rotate(k, self.far_key_positions(pos_k), inv_freq)

    def flex_pieces(self, q, k, pos_q, pos_k, inv_freq, attention_factor, scale):
        """The near / far description the FlexAttention passes run (lengen.kernels.flex_remap)."""
        q_far, k_far = self.far_rotated(q, k, pos_q, pos_k, inv_freq)
        # a tensor on q's device, not a Python float: compiled FlexAttention lifts a captured float
        # to a CPU scalar and its CUDA lowering fails on that (torch 2.11, H100, 2026-11-27);
        # torch.full, not torch.tensor: no host-to-device copy that waits for the stream, per layer
        w = torch.full((), float(self.window), dtype=torch.float64, device=q.device)

        def near(p_i, p_j, x_j):
            d = p_i - p_j
            return (d >= 0) & (d < w)

        def far(p_i, p_j, x_j):  # x_j: the Lambda-mask's far-key flag (1 / 0), if any
            return (p_i - p_j >= w) if x_j is None else (p_i - p_j >= w) & (x_j > 0)

        return TwoPiece(rotate(q, pos_q, inv_freq), rotate(k, pos_k, inv_freq), q_far, k_far,
                        scale * attention_factor ** 2, pos_q, pos_k, near, far, key=(self.name, str(self)),
                        key_extra=self.far_key_mask(pos_k))

    def attention(self, q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale):
        out = flex_remap.attend_method(self, q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale)
        if out is not None:
            return out
        k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])

        # attention_factor multiplies cos and sin of q and k: fold its square into the scale.
        return two_piece_attention(
            rotate(q, pos_q, inv_freq), rotate(k, pos_k, inv_freq), *self.far_rotated(q, k, pos_q, pos_k, inv_freq),
            v, pos_q, pos_k, self.window, scale * attention_factor ** 2,
            far_keys=self.far_key_mask(pos_k), block=self.block,
        )
