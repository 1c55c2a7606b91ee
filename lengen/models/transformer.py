"""A Transformer stack (encoder or decoder) wired to one positional encoding through its hooks."""

from __future__ import annotations

import torch
from torch import nn

from lengen.encodings import build_encoding
from lengen.models.attention import AttentionContext, SelfAttention, StackMember
from lengen.models.config import ModelConfig
from lengen.models.dropout import Dropout
from lengen.models.logit_scaling import check_logit_scale


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, pe, attention: type[SelfAttention] = SelfAttention):
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        self.attn = attention(cfg, layer, pe)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.ReLU(), nn.Linear(cfg.d_ff, cfg.d_model))
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        # one module per dropout call: a stack of models plans one mask per module (che.group)
        self.attn_drop = Dropout(cfg.dropout)
        self.ff_drop = Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
        s = ctx.stack
        if self.pre_norm:
            x = x + self.attn_drop(self.attn(self.norm1(x), ctx), s)
            return x + self.ff_drop(self.ff(self.norm2(x)), s)
        x = self.norm1(x + self.attn_drop(self.attn(x, ctx), s))
        return self.norm2(x + self.ff_drop(self.ff(x), s))


class Transformer(nn.Module):
    """Embeddings in, hidden states out. `pos` is [1, T] or [B, T], integer or float. `attention`
    is the attention module of every block (a SelfAttention subclass: the LM's DecoderAttention).
    `stack`: this forward is one model of a vmapped stack (lengen.che.group), which checks the
    positions itself, outside vmap (a check that reads values cannot run under vmap)."""

    def __init__(self, cfg: ModelConfig, attention: type[SelfAttention] = SelfAttention):
        super().__init__()
        cfg.validate()
        check_logit_scale(cfg)
        self.cfg = cfg
        self.pe = build_encoding(cfg)
        self.blocks = nn.ModuleList(Block(cfg, i, self.pe, attention) for i in range(cfg.num_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        self.drop = Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, stack: StackMember | None = None) -> torch.Tensor:
        if pos.dim() == 1:
            pos = pos.unsqueeze(0)
        if pos.shape[-1] != x.shape[1] or pos.shape[0] not in (1, x.shape[0]):
            raise ValueError(f"positions {tuple(pos.shape)} do not match the input {tuple(x.shape[:2])}")
        pos = pos.to(x.device)
        if stack is None:
            self.pe.check_positions(pos)
        x = self.drop(self.pe.embed(x, pos), stack)
        ctx = AttentionContext(self.pe.prepare(pos, pos), pos, pos, self.cfg.causal, stack)
        for block in self.blocks:
            x = block(x, ctx)
        return self.final_norm(x)
