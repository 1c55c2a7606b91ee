"""MaskedLM: byte embedding (bytes, EOS, MASK) -> the core Transformer as a bidirectional
encoder (causal=False; pre-LN adds its final norm) -> a linear head over bytes and EOS."""

from __future__ import annotations

import math

import torch
from torch import nn

from lengen.data.tokenizer import ByteTokenizer
from lengen.errors import LengenError
from lengen.mlm.masking import INPUT_VOCAB
from lengen.models.config import ModelConfig
from lengen.models.transformer import Transformer


class MaskedLM(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int = ByteTokenizer.vocab_size):
        super().__init__()
        if cfg.causal:
            raise LengenError("a masked LM is bidirectional: it needs causal=False in its model config")
        self.cfg, self.vocab_size = cfg, vocab_size
        self.embed = nn.Embedding(INPUT_VOCAB, cfg.d_model)
        self.encoder = Transformer(cfg)
        self.head = nn.Linear(cfg.d_model, vocab_size)
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.embed_scale else 1.0
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    @property
    def pe(self):
        return self.encoder.pe

    def forward(self, ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] -> logits [B, T, vocab] (float32). positions [1|B, T], integer or float;
        None = 0..T-1."""
        if positions is None:
            positions = torch.arange(ids.shape[1], device=ids.device)[None]
        h = self.encoder(self.embed(ids) * self.embed_scale, positions)
        return self.head(h).float()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
