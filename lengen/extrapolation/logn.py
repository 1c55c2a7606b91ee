"""log-n attention scaling (Su 2022; used with ReRoPE and Self-Extend): the query at position p is
multiplied by max(1, ln(p + 1) / ln L0), keeping the attention entropy of long contexts close to
that of the training length. Composes with any other method ("rerope+logn")."""

from __future__ import annotations

import math

import torch

from lengen.extrapolation.base import ExtrapolationMethod


def logn_scale(pos: torch.Tensor, train_length: int) -> torch.Tensor:
    return (torch.log(pos.double() + 1) / math.log(train_length)).clamp(min=1.0)


class LogN(ExtrapolationMethod):
    name = "logn"
    kind = "scale"

    def query_scale(self, pos_q: torch.Tensor) -> torch.Tensor:
        return logn_scale(pos_q, self.rope.train_length).float()[:, None, :, None]
