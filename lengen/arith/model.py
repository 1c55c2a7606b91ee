"""ArithLM: token embedding (+ Abacus embedding) -> the core Transformer as a causal decoder
(lengen.models.transformer, any registered encoding reading the positions it is given) -> logits
over the arithmetic vocabulary."""

from __future__ import annotations

import torch
from torch import nn

from lengen.arith.abacus import AbacusEmbedding
from lengen.arith.vocab import VOCAB_SIZE
from lengen.errors import LengenError
from lengen.models.config import ModelConfig
from lengen.models.transformer import Transformer


class ArithLM(nn.Module):
    def __init__(self, cfg: ModelConfig, abacus: bool):
        super().__init__()
        if not cfg.causal:
            raise LengenError("an arithmetic model is a causal decoder: it needs causal=True")
        self.cfg = cfg
        self.embed = nn.Embedding(VOCAB_SIZE, cfg.d_model)
        self.abacus = AbacusEmbedding(cfg.d_model) if abacus else None
        self.decoder = Transformer(cfg)
        self.head = nn.Linear(cfg.d_model, VOCAB_SIZE)
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    @property
    def pe(self):
        return self.decoder.pe

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor,
                abacus_ids: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B, T] at positions [1|B, T] (the encoding's), abacus_ids [B, T] (an Abacus
        model's) -> logits [B, T, vocab], float32."""
        x = self.embed(tokens)
        if self.abacus is not None:
            x = x + self.abacus(abacus_ids)
        return self.head(self.decoder(x, positions)).float()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build_model(cfg) -> ArithLM:
    """The model of run config `cfg` (an ArithConfig), its initial weights fixed by cfg.seed."""
    torch.manual_seed(cfg.seed)
    return ArithLM(cfg.model, cfg.abacus)
