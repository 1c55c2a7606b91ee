"""What the model reads besides the tokens: the encoding's positions (lengen.arith.coupling) and,
for an Abacus model, the abacus ids, with their training offsets drawn from one torch generator."""

from __future__ import annotations

import torch

from lengen.arith.abacus import abacus_ids, draw_offset
from lengen.arith.coupling import ARITH_POSITIONS


class Feeder:
    def __init__(self, cfg):
        self.source = ARITH_POSITIONS.get(cfg.positions)(cfg.model.max_position)
        self.abacus, self.abacus_k = cfg.abacus, cfg.abacus_k

    def __call__(self, tokens: torch.Tensor, significance: torch.Tensor, generator: torch.Generator | None = None,
                 train: bool = False, answer_width: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(positions [1|B, T], abacus ids [B, T] or None); training draws the offsets (coupling's s
        per sequence, then Abacus's k per batch), evaluation uses s = 1 and k = 0. `answer_width`
        [B, 1]: each problem's padded answer digits (coupled ids count down from them)."""
        positions = self.source(significance, generator, train, answer_width)
        ids = None
        if self.abacus:
            ids = abacus_ids(tokens, draw_offset(self.abacus_k, generator) if train else 0)
        return positions, ids
