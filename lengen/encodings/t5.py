"""T5's bucketed relative bias (Raffel et al. 2020; HF `_relative_position_bucket`).

The distance rel = j - i goes to one of `num_buckets` buckets; each bucket has a learned bias
per head (an nn.Embedding(num_buckets, H), per layer or shared). Bidirectional: half the
buckets for keys after the query, half for keys before; causal: future keys share bucket 0
(they are masked anyway). Within a side, distances below max_exact = buckets/2 get their own
bucket, longer ones log-spaced buckets up to max_distance, everything beyond the last bucket.

T5 adds the bias to unscaled logits; here the logits carry the usual 1/sqrt(d) and the bias is
added as is. Buckets are defined on integer distances, and the table is a discrete, trained
lookup: like the learned table it refuses float position samplers (equal_mean) at config time.
Randomized integer positions are fine: their distances are bucketed like any others.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from lengen.encodings.base import PositionalEncoding


def relative_position_bucket(rel: torch.Tensor, bidirectional: bool, num_buckets: int = 32,
                             max_distance: int = 128) -> torch.Tensor:
    """Bucket ids (int64) for integer distances rel = j - i (HF T5's rule)."""
    rel = rel.long()
    bucket = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (rel > 0).long() * num_buckets
        n = rel.abs()
    else:
        n = (-rel).clamp(min=0)
    max_exact = num_buckets // 2
    # clamp(min=1) only keeps log() finite where n < max_exact, whose value is unused.
    large = max_exact + (
        torch.log(n.clamp(min=1).float() / max_exact) / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).long()
    large = large.clamp(max=num_buckets - 1)
    return bucket + torch.where(n < max_exact, n, large)


class T5Encoding(PositionalEncoding):
    """Options: num_buckets (32), max_distance (128), shared (False: one table per layer)."""

    relative = True
    accepts_float_positions = False
    causal_past_only = True  # causal: every key after the query shares bucket 0

    def __init__(self, cfg, num_buckets: int = 32, max_distance: int = 128, shared: bool = False):
        super().__init__(cfg)
        self.num_buckets, self.max_distance = int(num_buckets), int(max_distance)
        n = 1 if shared else cfg.num_layers
        self.tables = nn.ModuleList(nn.Embedding(self.num_buckets, cfg.num_heads) for _ in range(n))
        for t in self.tables:  # HF T5's init scale, N(0, d_model^-1/2)
            nn.init.normal_(t.weight, std=cfg.d_model ** -0.5)

    def prepare(self, pos_q, pos_k):
        rel = pos_k.long()[:, None, :] - pos_q.long()[:, :, None]  # j - i, [B|1, Tq, Tk]
        return relative_position_bucket(rel, not self.cfg.causal, self.num_buckets, self.max_distance)

    def bias(self, layer, buckets):
        table = self.tables[layer if len(self.tables) > 1 else 0]
        return table(buckets).permute(0, 3, 1, 2).contiguous()  # [B|1, H, Tq, Tk], see fire.py
