"""`lengen hf tune`'s two slices of the text: the tune slice the search scores settings on, and the
evaluation slice the chosen one is reported on.

Every document of the text is cut into consecutive, non-overlapping sequences of L + 1
tokens (documents shorter than that are joined by EOS, as in lengen.data.long_sequences), long
documents' sequences first. The tune slice is the first `tune_docs` sequences; the evaluation slice
the next `eval_docs` sequences that share no document with the tune slice, or, when the text has
too few documents, other sequences of the same documents (never the same tokens; the output says
which documents are shared). `eval_text` takes the evaluation slice from another text instead:
that measures how far a setting tuned on one source carries to another."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lengen.data import load_documents
from lengen.data.batches import joined_short_documents
from lengen.errors import LengenError
from lengen.hf.loading import bos_prefix, corpus_encoder
from lengen.hf.scoring import sequences_digest
from lengen.hf.settings import TuneSettings


@dataclass
class Piece:
    tokens: np.ndarray        # L + 1 token ids
    docs: tuple               # indices of the documents it comes from
    start: int                # offset of its first token in its first document


def pieces(docs: list[np.ndarray], need: int, eos: int) -> list[Piece]:
    """Every document cut into consecutive sequences of `need` tokens (the rest dropped); then the
    shorter documents joined by EOS, as lengen.data.long_sequences does, consecutive ones together."""
    out = [Piece(d[k * need:(k + 1) * need].astype(np.int64), (i,), k * need)
           for i, d in enumerate(docs) if len(d) >= need for k in range(len(d) // need)]
    return out + [Piece(tokens, indices, 0) for indices, tokens in joined_short_documents(docs, need, eos)]


def split_slices(tune_from: list[Piece], n_tune: int, n_eval: int,
                 eval_from: list[Piece] | None = None) -> tuple[list[Piece], list[Piece]]:
    """(tune slice, evaluation slice). Without `eval_from`: the first n_tune pieces, then n_eval of
    the others, those sharing no document with the tune slice first."""
    tune = tune_from[:n_tune]
    if eval_from is not None:
        return tune, eval_from[:n_eval]
    used = {d for p in tune for d in p.docs}
    rest = sorted(tune_from[n_tune:], key=lambda p: bool(used & set(p.docs)))   # stable: in order
    return tune, rest[:n_eval]


def _describe(p: Piece, names: list[str]) -> dict:
    return {"documents": [names[i] for i in p.docs], "start": p.start, "tokens": len(p.tokens)}


def _digest(slice_: list[Piece]) -> str:
    return sequences_digest([p.tokens for p in slice_])


def make_slices(settings: TuneSettings, tokenizer) -> tuple[list[Piece], list[Piece], dict]:
    need = settings.length + 1
    enc = corpus_encoder(tokenizer)
    prefix = np.array(bos_prefix(tokenizer), dtype=np.int64)   # as hf eval's sequences begin

    def cut(d) -> list[Piece]:
        out = pieces(d.docs, need - len(prefix), d.eos)
        for p in out:
            p.tokens = np.concatenate([prefix, p.tokens])
        return out

    docs = load_documents(settings.text, enc)
    own = cut(docs)
    other = None
    if settings.eval_text is not None:
        eval_docs = load_documents(settings.eval_text, enc)
        other = cut(eval_docs)
    tune, evaluation = split_slices(own, settings.tune_docs, settings.eval_docs, other)
    if len(tune) < settings.tune_docs or len(evaluation) < settings.eval_docs:
        raise LengenError(
            f"the text gives {len(own)} sequences of {need} tokens"
            + (f" and --eval-text {len(other)}" if other is not None else "")
            + f"; the tune slice needs {settings.tune_docs} and the evaluation slice {settings.eval_docs}: "
            "give more text, fewer --tune-docs / --eval-docs, or --eval-text")
    eval_names = eval_docs.names if other is not None else docs.names
    shared = [] if other is not None else sorted(
        {docs.names[d] for p in evaluation for d in p.docs} & {docs.names[d] for p in tune for d in p.docs})
    info = {"text": docs.source, "eval_text": eval_docs.source if other is not None else None,
            "tune_slice": [_describe(p, docs.names) for p in tune],
            "eval_slice": [_describe(p, eval_names) for p in evaluation],
            "shared_documents": shared, "tune_tokens": _digest(tune), "eval_tokens": _digest(evaluation)}
    return tune, evaluation, info
