"""From method strings ("rope", "yarn:factor=4", "rerope:window=128+logn") to extrapolation
method objects for one model. The methods (and the spec-list parser split_methods) live in
lengen.extrapolation; this module handles the plain (no-method) case, picks default methods,
refuses methods on non-RoPE models and calibrates DPE's key pairs on the run's validation text."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from lengen.data import load_corpus, long_sequences
from lengen.errors import LengenError
from lengen.extrapolation import ExtrapolationMethod, build_method, is_plain
from lengen.extrapolation.dope import GramScores, choose_heads, dope_part
from lengen.extrapolation.dpe import PairScores, dpe_part, top_pairs
from lengen.lm.model import pe_description

#: DPE calibration: validation windows of L0 tokens (lengen.hf.calibration reads 4 as well)
CALIBRATION_WINDOWS = 4


@dataclass
class ResolvedMethod:
    label: str        # as given (or "base" for plain evaluation of a non-RoPE model)
    method: Any       # an lengen.extrapolation method, or None for the encoding's own hooks


def default_methods(is_rope: bool, train_length: int, max_length: int) -> list[str]:
    """Plain evaluation for non-RoPE models; for RoPE models the main families, frequency methods
    with factor = max_length / train_length and remapping methods with their default windows."""
    if not is_rope:
        return ["base"]
    f = max_length / train_length
    factor = int(f) if f == int(f) else round(f, 3)
    if factor <= 1:
        return ["rope"]
    return ["rope", f"pi:factor={factor}", f"ntk:factor={factor}", f"yarn:factor={factor}", "rerope", "self_extend"]


def sweep_methods(specs: list[str], is_rope: bool) -> list[str]:
    """The methods a sweep evaluates a run with: all of `specs` for a RoPE model; for any other
    model only the plain evaluation ("base"), since every other method needs RoPE."""
    return list(specs) if is_rope else ["base"]


def resolve_methods(specs: list[str], model) -> list[ResolvedMethod]:
    """Build every method up front, so a bad spec fails before any evaluation runs."""
    if not specs:
        raise LengenError("no methods given")
    out = []
    for spec in specs:
        if is_plain(spec):
            out.append(ResolvedMethod(spec if model.is_rope else "base", None))
            continue
        if not model.is_rope:
            raise LengenError(f"method {spec!r} needs a RoPE model, but this run uses {pe_description(model.cfg)}; "
                              f"evaluate it plainly with --methods base")
        out.append(ResolvedMethod(spec, build_method(spec, model.rope_spec())))
    labels = [m.label for m in out]
    if len(set(labels)) != len(labels):
        raise LengenError(f"methods listed twice: {labels}")
    return out


class QKCapture(ExtrapolationMethod):
    """Plain RoPE attention that first hands each layer's UN-rotated q [B, H, Tq, d] and k
    [B, Hk, Tk, d] to reducer(layer_index, q, k): the model's forward with this method is its
    forward with RoPE, observed (the capture of lengen.hf.calibration, for lengen's own models)."""

    name = "capture"

    def __init__(self, rope, reducer: Callable[[int, torch.Tensor, torch.Tensor], None],
                 inner: ExtrapolationMethod | None = None):
        super().__init__(rope)
        self.reducer, self.layer, self.inner = reducer, None, inner   # inner: what runs (None: RoPE)

    def for_layer(self, layer: int) -> "QKCapture":
        method = copy.copy(self)
        method.layer = layer
        return method

    def attend(self, q, k, v, pos_q, pos_k, scale=None, seq_len=None):
        self.reducer(self.layer, q, k)
        if self.inner is not None:
            return self.inner.attend(q, k, v, pos_q, pos_k, scale, seq_len)
        return super().attend(q, k, v, pos_q, pos_k, scale, seq_len)


@torch.no_grad()
def capture_qk(model, ids: torch.Tensor, reducer, method: str = "rope") -> None:
    """Run the decoder LM on token ids [N, T] (one sequence per forward) with `method` (a spec
    without calibration; plain RoPE by default), calling reducer(layer, q, k) in every RoPE layer
    with its un-rotated q and k."""
    model.eval()
    inner = None if is_plain(method) else build_method(method, model.rope_spec())
    method = QKCapture(model.rope_spec(), reducer, inner)
    for row in ids:
        model(row[None].to(model.embed.weight.device), method=method)


def calibrate_methods(methods: list[ResolvedMethod], model, corpus: str | None, val_fraction: float) -> None:
    """Set the key pairs of every DPE method that needs them, from CALIBRATION_WINDOWS validation
    windows of L0 tokens of the run's corpus (one pass for all), and the heads of every DoPE method,
    from one validation window of factor * L0 tokens, the model running Dynamic NTK (as lengen.hf)."""
    dopes = [part for part in (dope_part(m.method) for m in methods) if part is not None and part.needs_calibration]
    parts = [part for part in (dpe_part(m.method) for m in methods) if part is not None and part.needs_calibration]
    if not dopes and not parts:
        return
    L0 = model.rope_spec().train_length
    data = load_corpus(corpus, val_fraction)
    for part in dopes:
        length = max(L0, round(part.factor * L0))
        windows = long_sequences(data.val_docs, length, 1, data.eos)
        if not windows:
            raise LengenError(f"dope: the validation documents hold fewer than {length} tokens to choose the heads on")
        grams = GramScores(part)
        capture_qk(model, torch.from_numpy(np.stack(windows)), grams, method=part.calibration_spec())
        part.set_heads(choose_heads(part, grams.scores()))
    if not parts:
        return
    windows = long_sequences(data.val_docs, L0, CALIBRATION_WINDOWS, data.eos)
    if not windows:
        raise LengenError(f"dpe: the validation documents hold fewer than {L0} tokens to calibrate the key pairs on")
    ids = torch.from_numpy(np.stack(windows))
    scores = PairScores(model.rope_spec().rotary_dim)
    capture_qk(model, ids, scores)
    for part in parts:
        part.set_key_pairs(top_pairs(scores.scores(), part.topk))
