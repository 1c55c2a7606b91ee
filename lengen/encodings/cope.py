"""CoPE, Contextual Position Encoding (Golovneva et al. 2024, arXiv 2405.18719): a key's position
is the gated count of the tokens between it and the query, with content-dependent gates.

The paper's equations and the official code (facebookresearch/RAM, projects/cope,
`context_position.py`), which this follows where the two differ:

    g_ij = sigmoid(q_i . k_j / sqrt(d))              eq. 3; the code divides by sqrt(d) inside
    p_ij = sum_{t=j..i} g_it                         eq. 4; the code: a reverse cumsum over the keys,
                                                     future gates zeroed; here one cumsum C_ij and
                                                     C_ii - C_ij + g_ij (cope_positions), the same
                                                     for every key a causal query sees
    p_ij <- min(p_ij, npos - 1)                      the code's clamp (positions beyond the table)
    z_i[t] = q_i . e[t],  t = 0..npos-1              sec. 3: logits for the integer positions
    z_i[p] = (p - floor p) z_i[ceil p] + (1 - p + floor p) z_i[floor p]     eq. 5, on the logits
    a_ij = softmax_j((q_i . k_j + z_i[p_ij]) / sqrt(d))                       eq. 6 and the code

floor/ceil are indices (no gradient); the weight p - floor(p) carries the gradient to the gates.
e is one [head_dim, npos] table per layer, shared by the layer's heads, zero at init (the code's
`zeros(1, head_dim, npos)`).

lengen specifics:
  * The hook is `qk_bias`: it gets q, k and the softmax scale as the attention sees them (after
    key norm, transform_qk and logit scaling) and returns scale * z_i[p_ij]. The gate uses the
    same scaled logit as the softmax, scale * q.k, which is the code's q.k/sqrt(d) in the default
    model (the code also reuses the gate logits as the attention logits); with log-n scaling or
    key norm the gates see the scaled logit too.
  * npos (option `npos`): default ModelConfig.train_tokens + 1, the code's block_size + 1 (a
    count over T tokens reaches at most T); max_position when train_tokens is unknown. Only the
    first min(npos, Tk + 1) rows are used per call, since p <= Tk.
  * Bidirectional (encoder) attention, our choice (the paper is causal only): the gates are
    counted from the query to the key in either direction, p_ij = sum of g_it over t between j
    and i, both ends included (t = j..i for j <= i, t = i..j for j > i), and each layer has a
    second table e' for the keys right of the query (j > i): the count says how far, the table
    which side. With one table a bidirectional CoPE model could not tell a sequence from its
    reverse (the counts are symmetric); lengen's other bidirectional variants add direction the
    same way (KERPLE's two parameter sets, FIRE's sign input, ALiBi's -0.5 for earlier keys).
  * The position tensor is not read: CoPE's positions come from the content and the token order,
    so every sampler gives the same logits (causality and "between" are by token index).
"""

from __future__ import annotations

import torch
from torch import nn

from lengen.encodings.base import PositionalEncoding
from lengen.errors import LengenError

#: elements of one [B, H, rows, Tk] block when evaluating without autograd (4 MB in float32: on a
#: shared 2-core CPU, B=4 H=8 T=1000 took about 1 s per layer with 2^16..2^20 and 4.4 s with 2^24)
CHUNK_ELEMENTS = 1 << 20


def cope_positions(gates: torch.Tensor, first: int | None = None) -> torch.Tensor:
    """p_ij (eq. 4) from gates [..., Tq, Tk] of the queries at token indices first..first+Tq-1
    (default: the last Tq of the Tk keys): the sum of g_it over t between j and i, both included.
    With C_ij = sum_{t<=j} g_it, that is C_ii - C_ij + g_ij for j <= i and C_ij - C_ii + g_ii for
    j >= i; each is <= 0 where the other applies, so p is their maximum: one cumsum, no masks.
    A causal model masks j > i, so zeroing the future gates as the official code does changes
    nothing on the keys it sees (for j <= i only gates t <= i enter)."""
    Tq, Tk = gates.shape[-2:]
    first = Tk - Tq if first is None else first
    C = gates.cumsum(-1)
    diag = torch.arange(first, first + Tq, device=gates.device)[:, None].expand(*gates.shape[:-1], 1)
    C_ii = C.gather(-1, diag)                                  # [..., Tq, 1]
    E_ii = C_ii - gates.gather(-1, diag)                       # sum_{t<i} g_it
    return torch.maximum(C_ii - C + gates, C - E_ii)           # t = j..i for j <= i, t = i..j for j >= i


class CopeEncoding(PositionalEncoding):
    """CoPE. Option: npos (rows of each layer's position table; default train_tokens + 1).
    Parameters: pos_emb [layers, head_dim, npos] (e), and pos_emb_right (e') when bidirectional."""

    relative = True  # trivially: no position value is read (the positions are gated counts)

    def __init__(self, cfg, npos: int | None = None):
        super().__init__(cfg)
        if npos is None:
            npos = cfg.train_tokens + 1 if cfg.train_tokens else cfg.max_position
        if isinstance(npos, bool) or int(npos) != npos or npos < 2:
            raise LengenError(f"cope: npos must be an integer >= 2, got {npos!r}")
        self.npos = int(npos)
        self.pos_emb = nn.Parameter(torch.zeros(cfg.num_layers, cfg.head_dim, self.npos))
        # bidirectional: e' for keys right of the query (j > i); e serves j <= i
        self.pos_emb_right = None if cfg.causal else nn.Parameter(torch.zeros_like(self.pos_emb))

    def qk_bias(self, layer, state, q, k, scale, causal):
        # at least float32, also under autocast: a cumsum over hundreds of gates in bf16 loses the counts
        dtype = torch.promote_types(q.dtype, torch.float32)
        with torch.autocast(q.device.type, enabled=False):
            q, k = q.to(dtype), k.to(dtype)
            rows = min(self.npos, k.shape[-2] + 1)                             # p <= Tk: rows beyond unused
            e = self.pos_emb[layer, :, :rows]
            if self.pos_emb_right is not None:                                 # [e | e'], e' at rows..2 rows-1
                e = torch.cat([e, self.pos_emb_right[layer, :, :rows]], dim=-1)
            e = e.to(dtype)
            Tq, Tk = q.shape[-2], k.shape[-2]
            block = max(1, CHUNK_ELEMENTS // max(1, q[..., :1, :1].numel() * Tk))
            if torch.is_grad_enabled() or block >= Tq:
                return self._bias(q, k, e, rows, scale, Tk - Tq)
            # no autograd (evaluation): every query row is independent, so query blocks bound the
            # temporaries (about ten of the output's size) to a few blocks; only the output is whole.
            # Allocated from the first block: batched whenever it is (vmap over a stack of models)
            top = self._bias(q[..., :block, :], k, e, rows, scale, Tk - Tq)
            out = top.new_empty(*q.shape[:-1], Tk)
            out[..., :block, :] = top
            for a in range(block, Tq, block):
                out[..., a:a + block, :] = self._bias(q[..., a:a + block, :], k, e, rows, scale, Tk - Tq + a)
            return out

    def _bias(self, q, k, e, rows, scale, first):
        """scale * z_i[p_ij] for the queries q at token indices first, first + 1, ...; e holds
        `rows` rows of the table (then as many of e' for keys right of the query, bidirectional)."""
        q = q * scale                      # s q: the [B, H, Tq, d] side, cheaper than scaling the logits
        gates = torch.sigmoid(q @ k.transpose(-1, -2))                     # eq. 3 (code: / sqrt d)
        p = cope_positions(gates, first).clamp(0, self.npos - 1)           # eq. 4, the code's clamp
        z = q @ e                                                          # s z_i[t] = s q_i . e[t]
        floor = p.detach().floor()                                         # indices: no gradient
        w = p - floor                                                      # differentiable weight
        lo, hi = floor.long(), p.detach().ceil().long()
        if self.pos_emb_right is not None:  # keys right of the query read e' (columns rows.. of z)
            Tq, Tk = gates.shape[-2:]
            right = (torch.arange(Tk, device=q.device) > torch.arange(first, first + Tq, device=q.device)[:, None])
            lo, hi = lo + right * rows, hi + right * rows
        # eq. 5, (1 - w) z[lo] + w z[hi]; with the factor s, eq. 6's z / sqrt(d) for (q.k + z) / sqrt(d)
        return torch.lerp(z.gather(-1, lo), z.gather(-1, hi), w)
