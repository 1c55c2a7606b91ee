"""Dual Chunk Attention (An et al. 2024, HKUNLP/ChunkLlama; Qwen2.5-1M's `dual_chunk_attention_config`,
vLLM's DualChunkRotaryEmbedding), in the code's parameterisation (not the paper's, see below).

The sequence is cut into chunks of s = chunk_size - local_size positions, anchored at position 0;
o(p) = p mod s. Keys sit at o(p_j); queries at o(p_i) (same chunk), s + min(o(p_i), local_size)
(previous chunk) or C (older chunks). Per pair this is one formula (delta = p_i - p_j):

    r(i, j) = min(delta, C - (p_j mod s)),   s = chunk_size - local_size,   C = min(chunk_size, 2s - 1)

near (r = delta, ordinary RoPE) iff p_i <= C + s floor(p_j / s); every other causal pair is far:
q rotated by the constant C, k by o(p_j). r never exceeds C (= chunk_size, one past the largest
distance of a chunk_size window: allowed, as the references do). T <= s: plain RoPE.

Defaults (ChunkLlama's `replace_with_chunkllama(pretraining_length=L0)`): chunk_size = 3 L0 // 4,
local_size = L0 // 8 (Llama-2, L0 = 4096: 3072 / 512). local_size >= chunk_size is refused.

Temperature (Qwen2.5-1M under vLLM): with `original_length` > 0 the logits are multiplied by m^2,
m = max(1, 1 + 0.1 ln(T / original_length)), T = the current total length max(position) + 1
(recomputed at every call; vLLM keeps each cached key's m of its own step, so decoding differs from
vLLM's there). The temperature is applied inside the attention, not through the frequencies, so
with it lengen.lm's and lengen.hf's KV caches decode exactly in the first layer only: cached keys of
higher layers come from hidden states computed at an earlier length's temperature (as in vLLM,
where each key keeps its step's m). Default 0: no temperature (vLLM's default, and ChunkLlama's paper results).

The paper (Eq. 2-8; chunk s_p, pretraining length c) is the code with chunk_size = c - 1 and
local_size = c - 1 - s_p.

Not shift-invariant: chunks are anchored at absolute position 0. Attention is blockwise (query
blocks x key blocks classified by position ranges; the far keys of a query block are one unmasked
call, only blocks straddling a per-key threshold get a mask), memory O(T d + block T); on CUDA
the two FlexAttention passes of `flex_pieces` (lengen.kernels.flex_remap), blockwise as the fallback.
"""

from __future__ import annotations

import math

import torch

from lengen.encodings.rope import apply_rotary, rope_cos_sin
from lengen.extrapolation.base import ExtrapolationMethod, repeat_kv, sequence_length
from lengen.kernels.lse_attention import attention_with_lse, merge
from lengen.kernels import flex_remap
from lengen.kernels.flex_remap import TwoPiece
from lengen.kernels.remap_tiles import RemapRule
from lengen.extrapolation.remap import constant_positions

NONE, PART, FULL = 0, 1, 2


class DualChunk(ExtrapolationMethod):
    name = "dca"
    kind = "remap"
    remaps = True

    def __init__(self, rope, chunk_size: int | None = None, local_size: int | None = None,
                 original_length: int = 0, block: int = 256):
        super().__init__(rope)
        L0 = rope.train_length
        self.chunk_size = int(chunk_size) if chunk_size is not None else max(2, 3 * L0 // 4)
        self.local_size = int(local_size) if local_size is not None else L0 // 8
        self.original_length = int(original_length or 0)
        self.block = int(block)
        if self.local_size < 0 or self.local_size >= self.chunk_size:
            raise ValueError(f"need 0 <= local_size < chunk_size (got local_size={self.local_size}, "
                             f"chunk_size={self.chunk_size})")
        if self.block < 1 or self.original_length < 0:
            raise ValueError("block must be >= 1 and original_length >= 0")
        self.s = self.chunk_size - self.local_size
        self.C = min(self.chunk_size, 2 * self.s - 1)

    def window_problem(self) -> str | None:
        L0 = self.rope.train_length
        if self.chunk_size <= L0:   # r <= C <= chunk_size: at most L0, as the references allow
            return None
        return (f"the chunk_size ({self.chunk_size}) must be <= {L0} for a model trained on {L0} tokens: "
                "distances within a chunk stay as they are, past what the model saw; give chunk_size <= "
                f"{L0}, or leave it out for the default")

    # ---- the position map --------------------------------------------------------------------
    def key_offsets(self, pos_k: torch.Tensor) -> torch.Tensor:
        return torch.remainder(pos_k.double(), self.s)

    def thresholds(self, pos_k: torch.Tensor) -> torch.Tensor:
        """Largest query position that sees key j at its true distance: C + s floor(p_j / s)."""
        pk = pos_k.double()
        return self.C + pk - self.key_offsets(pk)

    def relative_positions(self, pos_q, pos_k):
        pq, pk = pos_q.double(), pos_k.double()
        delta = pq[:, :, None] - pk[:, None, :]
        r = torch.minimum(delta, self.C - self.key_offsets(pk)[:, None, :])
        return r.masked_fill(delta < 0, float("nan"))

    def temperature(self, seq_len: int) -> float:
        if self.original_length <= 0:
            return 1.0
        return max(1.0, 1.0 + 0.1 * math.log(seq_len / self.original_length))

    # ---- attention ---------------------------------------------------------------------------
    def remap_rule(self) -> RemapRule:
        """near iff p_i <= C + s floor(p_j / s); far: q at C, k at p_j mod s."""
        return RemapRule(self.C, chunk=self.s, q_mul=0.0, q_add=self.C, k_mode="mod")

    def kernel_rule(self, pos_q, pos_k, attention_factor, scale):
        m = self.temperature(sequence_length(pos_q, pos_k))
        return self.remap_rule(), scale * (attention_factor * m) ** 2

    def flex_pieces(self, q, k, pos_q, pos_k, inv_freq, attention_factor, scale):
        """The near / far description the FlexAttention passes run (lengen.kernels.flex_remap):
        near iff p_j <= p_i <= thr_j, far iff p_i > thr_j."""
        m = self.temperature(sequence_length(pos_q, pos_k))

        def rotate(x, pos):
            return apply_rotary(x, *rope_cos_sin(pos.to(x.device), inv_freq))

        def near(p_i, p_j, thr_j):
            return (p_j <= p_i) & (p_i <= thr_j)

        def far(p_i, p_j, thr_j):
            return p_i > thr_j

        return TwoPiece(rotate(q, pos_q), rotate(k, pos_k),
                        rotate(q, constant_positions(pos_q, self.C)), rotate(k, self.key_offsets(pos_k)),
                        scale * (attention_factor * m) ** 2, pos_q, pos_k, near, far,
                        key=(self.name, str(self), m), key_extra=self.thresholds(pos_k))

    def attention(self, q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale):
        out = flex_remap.attend_method(self, q, k, v, pos_q, pos_k, inv_freq, attention_factor, scale)
        if out is not None:
            return out
        k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
        m = self.temperature(sequence_length(pos_q, pos_k))
        scale = scale * (attention_factor * m) ** 2

        def rotate(x, pos):
            return apply_rotary(x, *rope_cos_sin(pos.to(x.device), inv_freq))

        offsets = self.key_offsets(pos_k)
        q_near, k_near = rotate(q, pos_q), rotate(k, pos_k)
        q_far, k_far = rotate(q, constant_positions(pos_q, self.C)), rotate(k, offsets)
        return dual_chunk_blockwise(q_near, k_near, q_far, k_far, v, pos_q, pos_k,
                                    self.thresholds(pos_k), scale, self.block)


def dual_chunk_blockwise(q_near, k_near, q_far, k_far, v, pos_q, pos_k, thr, scale, block):
    """Causal attention where pair (i, j) scores q_near.k_near if p_j <= p_i <= thr_j and
    q_far.k_far if p_i > thr_j (thr_j >= p_j + 1). Query blocks x key blocks, classified from
    position ranges; adjacent key blocks of one kind form one call, mixed ones get a mask."""
    Tq, Tk = q_near.shape[-2], k_near.shape[-2]
    dev = q_near.device
    pq, pk, th = pos_q.detach().double().to(dev), pos_k.detach().double().to(dev), thr.to(dev)
    kblocks = []
    for a in range(0, Tk, block):
        z = min(a + block, Tk)
        kblocks.append((a, z, pk[:, a:z].min().item(), pk[:, a:z].max().item(),
                        th[:, a:z].min().item(), th[:, a:z].max().item()))
    out = torch.empty_like(q_near)
    for s in range(0, Tq, block):
        e = min(s + block, Tq)
        q_min, q_max = pq[:, s:e].min().item(), pq[:, s:e].max().item()
        runs: list[list] = []
        for a, z, k_min, k_max, t_min, t_max in kblocks:
            near = NONE if (q_max < k_min or q_min > t_max) else (
                FULL if (q_min >= k_max and q_max <= t_min) else PART)
            far = NONE if q_max <= t_min else (FULL if q_min > t_max else PART)
            if near == NONE and far == NONE:
                continue
            kind = ("near" if far == NONE and near == FULL else
                    "far" if near == NONE and far == FULL else "mixed")
            if runs and runs[-1][0] == kind and runs[-1][2] == a:
                runs[-1][2] = z
            else:
                runs.append([kind, a, z])
        pieces = []
        for kind, a, z in runs:
            if kind == "mixed":
                p_i = pq[:, None, s:e, None]
                near = (pk[:, None, None, a:z] <= p_i) & (p_i <= th[:, None, None, a:z])
                far = p_i > th[:, None, None, a:z]
                masks = [("near", near), ("far", far)]
            else:
                masks = [(kind, None)]
            for part, mask in masks:
                if mask is not None and not bool(mask.any()):
                    continue
                qq, kk = (q_near, k_near) if part == "near" else (q_far, k_far)
                pieces.append(attention_with_lse(qq[:, :, s:e], kk[:, :, a:z], v[:, :, a:z], scale, mask))
        out[:, :, s:e] = merge(pieces, out.dtype)[0] if pieces else 0
    return out
