"""Where the arithmetic tasks' positions come from: `standard` (0..T-1) or `coupled` (Cho et al.
2024, arXiv 2405.20671: tokens of equal significance share an id). They are data, as every
lengen position (docs/design.md): the model's positional encoding (lengen.encodings) reads
whatever tensor these give, so coupling combines with the learned table (the paper's), RoPE,
FIRE and the rest. Unlike lengen.positions' samplers they read the sequence itself (each token's
significance, lengen.arith.formats), which is why they live with the tasks. Adding one: a class
here and one `ARITH_POSITIONS.add` line."""

from __future__ import annotations

import torch

from lengen.arith.vocab import OPERATOR
from lengen.errors import LengenError
from lengen.registry import Registry


class StandardIds:
    """0, 1, ..., T-1, shared by the batch."""

    #: whether the ids depend on what each token is worth (decoding then needs it in advance)
    needs_significance = False

    def __init__(self, max_position: int):
        self.max_position = max_position

    def __call__(self, significance: torch.Tensor, generator: torch.Generator | None = None,
                 train: bool = False, answer_width: torch.Tensor | None = None) -> torch.Tensor:
        return torch.arange(significance.shape[-1], device=significance.device)[None]


class CoupledIds:
    """Cho et al.'s coupled ids, as their code assigns them (position-coupling
    src/data/addition.py, AdditionDatasetWithCoupledPositions): with W + 1 the answer's padded
    width, a digit worth 10^t gets s + W - t (operands and answer alike), '+', '*' and '=' get
    s + W + 1, BOS, EOS and padding 0. So the operands read upwards to the operator, the answer,
    written least significant digit first, counts down from s + W to s, and the EOS follows the
    smallest id of the sequence. Training draws s ~ U{1..max_pos - len(c)} per sequence (len(c) =
    W + 1, max_pos = max_position - 1, the table having max_position rows; the largest id s + len(c)
    stays <= max_pos); evaluation uses s = 1. 57+68 in their format, [BOS]57+68=521[EOS] ->
    [0,2,3,4,2,3,4,3,2,1,0]."""

    needs_significance = True

    def __init__(self, max_position: int):
        self.max_position = max_position

    def __call__(self, significance: torch.Tensor, generator: torch.Generator | None = None,
                 train: bool = False, answer_width: torch.Tensor | None = None) -> torch.Tensor:
        """`answer_width` [B, 1]: each sequence's padded answer digits (the format's, known from
        the operands before the answer is decoded); left None, the widest number of each (whole)
        sequence."""
        B = significance.shape[0]
        if answer_width is None:
            answer_width = significance.max(dim=-1, keepdim=True).values + 1
        width = answer_width.reshape(B, 1).cpu()
        s = torch.ones(B, 1, dtype=torch.long)
        if train:
            top = self.max_position - 1 - width                             # s's largest value
            if int(top.min()) < 1:
                raise LengenError(f"coupled positions: an answer of {int(width.max())} digits needs "
                                  f"max-position >= {int(width.max()) + 2}")
            s = 1 + (torch.rand(B, 1, generator=generator) * top).long()     # U{1..top}
        s, width = s.to(significance.device), width.to(significance.device)
        return torch.where(significance >= 0, s + width - 1 - significance,
                           torch.where(significance == OPERATOR, s + width, torch.zeros_like(significance)))


ARITH_POSITIONS: Registry[type] = Registry("arithmetic position source")
ARITH_POSITIONS.add("standard", StandardIds)
ARITH_POSITIONS.add("coupled", CoupledIds)
