"""Problems -> padded tensors for the decoder: tokens, each token's significance, and the loss
targets (the next token where it is part of the answer or its EOS, ignored elsewhere: the loss is
on the answer only, as both papers take it)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lengen.arith.formats import Encoded
from lengen.arith.vocab import BOUNDARY, PAD

IGNORE = -100  # cross_entropy's ignore_index


@dataclass
class ArithBatch:
    tokens: torch.Tensor        # int64 [B, T], right-padded with PAD
    significance: torch.Tensor  # int64 [B, T], BOUNDARY on padding
    targets: torch.Tensor       # int64 [B, T - 1]: tokens[:, 1:] on answer tokens and EOS, else IGNORE
    answer_width: torch.Tensor  # int64 [B, 1]: the widest answer of each problem's operands (coupled ids)


def collate(encoded: list[Encoded]) -> ArithBatch:
    T = max(len(e.tokens) for e in encoded)
    tokens = torch.full((len(encoded), T), PAD, dtype=torch.long)
    sig = torch.full((len(encoded), T), BOUNDARY, dtype=torch.long)
    targets = torch.full((len(encoded), T - 1), IGNORE, dtype=torch.long)
    for row, e in enumerate(encoded):
        n = len(e.tokens)
        tokens[row, :n] = torch.tensor(e.tokens)
        sig[row, :n] = torch.tensor(e.significance)
        # the token at index i predicts index i + 1: the answer starts at prompt_length
        targets[row, e.prompt_length - 1:n - 1] = tokens[row, e.prompt_length:n]
    return ArithBatch(tokens, sig, targets, torch.tensor([[e.answer_width] for e in encoded], dtype=torch.long))
