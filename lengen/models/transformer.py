"""A Transformer stack (encoder or decoder) wired to one positional encoding through its hooks."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lengen.encodings import build_encoding
from lengen.kernels.layer_norm import LayerNorm
from lengen.models.attention import ONE_MODEL, AttentionContext, Runtime, SelfAttention
from lengen.models.config import ModelConfig
from lengen.models.dropout import Dropout
from lengen.models.logit_scaling import check_logit_scale


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, pe):
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        self.attn = SelfAttention(cfg, layer, pe)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.ReLU(), nn.Linear(cfg.d_ff, cfg.d_model))
        self.norm1 = LayerNorm(cfg.d_model)
        self.norm2 = LayerNorm(cfg.d_model)
        # one module per dropout call: a stack of models plans one mask per module (lengen.che.stack)
        self.attn_drop = Dropout(cfg.dropout)
        self.ff_drop = Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
        drop = ctx.runtime.dropout
        if self.pre_norm:
            x = x + drop(self.attn_drop, self.attn(self.norm1(x), ctx))
            return x + drop(self.ff_drop, self.ff(self.norm2(x)))
        x = self.norm1(x + drop(self.attn_drop, self.attn(x, ctx)))
        return self.norm2(x + drop(self.ff_drop, self.ff(x)))


class Transformer(nn.Module):
    """Embeddings in, hidden states out: the CHE encoder and the decoder LM alike.

    `pos_q` [1|B, T] (integer or float) are the positions of x's tokens; `pos_k` those of every
    key (default: pos_q; with a `cache` of earlier tokens, theirs followed by pos_q). `method`: a
    training-free RoPE method (lengen.extrapolation) for the RoPE layers, `seq_len` the sequence
    length it picks its frequencies for (a caller that knows it saves each layer a search of
    pos_k). `runtime`: how attention and dropout run (models.attention.Runtime; grouped training
    injects its own)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        check_logit_scale(cfg)
        self.cfg = cfg
        self.pe = build_encoding(cfg)
        self.blocks = nn.ModuleList(Block(cfg, i, self.pe) for i in range(cfg.num_layers))
        self.final_norm = LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        self.drop = Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, pos_q: torch.Tensor, pos_k: torch.Tensor | None = None,
                cache: Any = None, method: Any = None, seq_len: int | None = None,
                runtime: Runtime = ONE_MODEL) -> torch.Tensor:
        if pos_q.dim() == 1:
            pos_q = pos_q.unsqueeze(0)
        if pos_q.shape[-1] != x.shape[1] or pos_q.shape[0] not in (1, x.shape[0]):
            raise ValueError(f"positions {tuple(pos_q.shape)} do not match the input {tuple(x.shape[:2])}")
        pos_q = pos_q.to(x.device)
        pos_k = pos_q if pos_k is None else pos_k.to(x.device)
        runtime.check_positions(self.pe, pos_k)
        # an encoding's float32 table added to bf16 embeddings (a group's bf16 activations) keeps
        # them bf16; for float32 embeddings `.to` is the tensor itself
        x = runtime.dropout(self.drop, self.pe.embed(x, pos_q).to(x.dtype))
        # a method replaces RoPE's hooks; a per-layer pattern's other layers keep their own
        state = None if method is not None and self.pe.rotary else self.pe.prepare(pos_q, pos_k)
        ctx = AttentionContext(state, pos_q, pos_k, self.cfg.causal, cache, method, seq_len, runtime)
        for block in self.blocks:
            x = block(x, ctx)
        return self.final_norm(x)
