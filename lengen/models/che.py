"""The seed paper's CHE model: an encoder that reads the input followed by output_length EMPTY
tokens (id = input vocab size) and predicts the answer at those last positions."""

from __future__ import annotations

import math

import torch
from torch import nn

from lengen.models.attention import ONE_MODEL, Runtime
from lengen.models.config import ModelConfig
from lengen.models.transformer import Transformer


class CHEModel(nn.Module):
    def __init__(self, cfg: ModelConfig, input_vocab_size: int, output_vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.empty_token = input_vocab_size
        self.embed = nn.Embedding(input_vocab_size + 1, cfg.d_model)
        self.encoder = Transformer(cfg)
        self.readout = nn.Linear(cfg.d_model, output_vocab_size)
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.embed_scale else 1.0

    def forward(self, inputs: torch.Tensor, output_length: int, positions: torch.Tensor | None = None):
        """inputs [B, L] -> logits [B, output_length, output_vocab]. `positions` cover all
        L + output_length tokens; None means 0..T-1."""
        B, L = inputs.shape
        empty = torch.full((B, output_length), self.empty_token, dtype=inputs.dtype, device=inputs.device)
        tokens = torch.cat([inputs, empty], dim=1)
        if positions is None:
            positions = torch.arange(tokens.shape[1], device=inputs.device)[None]
        return self.readout(self.hidden(tokens, positions)[:, L:])

    def hidden(self, tokens: torch.Tensor, positions: torch.Tensor, runtime: Runtime = ONE_MODEL):
        """The encoder's output [B, T, d] for the whole sequence `tokens` [B, T]."""
        return self.encoder(self.embed(tokens) * self.embed_scale, positions, runtime=runtime)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
