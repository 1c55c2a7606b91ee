"""Abacus embeddings (McLeish et al. 2024, arXiv 2405.17399): a learned vector per place of a digit
within its number, added to the token embedding at the input only.

Ids: every maximal run of digit tokens is numbered 1, 2, 3, ... from the left; other tokens get 0
(row 0 is learned too). With reversed numbers id 1 is the least significant digit, so a digit and
the digits it adds up with share an id. Training adds one offset k ~ U{0..max_k}, shared by the
batch, to every nonzero id, so the rows for long numbers are trained on short ones; evaluation
uses k = 0. 89+54=341 -> [1,2,0,1,2,0,1,2,3]; with k = 5 -> [6,7,0,6,7,0,6,7,8]."""

from __future__ import annotations

import torch
from torch import nn

from lengen.errors import LengenError

#: rows of the table (the paper's Embedding(1024, d))
ABACUS_ROWS = 1024


def abacus_ids(tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """[B, T] token ids (digits are 0..9) -> [B, T] abacus ids, `offset` added to the digits'."""
    digit = (tokens >= 0) & (tokens <= 9)
    idx = torch.arange(tokens.shape[-1], device=tokens.device).expand_as(tokens)
    # the index of the last non-digit at or before each token (-1 before the first)
    last_break = torch.where(digit, torch.full_like(idx, -1), idx).cummax(dim=-1).values
    return torch.where(digit, idx - last_break + offset, torch.zeros_like(idx))


def draw_offset(max_k: int, generator: torch.Generator) -> int:
    """The training offset of one forward pass: k ~ U{0..max_k}."""
    return int(torch.randint(0, max_k + 1, (), generator=generator))


class AbacusEmbedding(nn.Module):
    def __init__(self, d_model: int, rows: int = ABACUS_ROWS):
        super().__init__()
        self.table = nn.Embedding(rows, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hi = int(ids.max()) if ids.numel() else 0
        if hi >= self.table.num_embeddings:
            raise LengenError(f"abacus id {hi} is past the table's {self.table.num_embeddings} rows; "
                              "use shorter numbers or a smaller abacus-k")
        return self.table(ids)
