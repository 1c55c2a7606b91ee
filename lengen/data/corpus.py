"""A tokenised corpus split into training and validation documents.

Split: a document is validation when the hash of its name (its path relative to the corpus root)
falls below `val_fraction`, so the split does not depend on file order, on the machine, or on
which other files exist. At least one document goes to each side; a one-document corpus is split
by position (its last `val_fraction` of tokens is validation)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from lengen.data.cache import cache_dir, cache_key, load_arrays, save_arrays
from lengen.data.sources import resolve_source
from lengen.errors import LengenError
from lengen.data.tokenizer import ByteTokenizer


@dataclass
class Corpus:
    source: str
    train_docs: list[np.ndarray]    # token arrays (uint16), in name order
    val_docs: list[np.ndarray]
    eos: int                        # separator id used when documents are joined
    from_cache: bool = False        # whether tokens were read from the on-disk cache

    def stream(self, split: str) -> np.ndarray:
        """All documents of one split joined by EOS (each document followed by one EOS)."""
        docs = self.train_docs if split == "train" else self.val_docs
        eos = np.array([self.eos], dtype=np.uint16)
        return np.concatenate([part for d in docs for part in (d, eos)]) if docs else np.zeros(0, np.uint16)

    def summary(self) -> str:
        n_train = sum(len(d) for d in self.train_docs)
        n_val = sum(len(d) for d in self.val_docs)
        return (f"{self.source}: {len(self.train_docs)} train docs ({n_train:,} tokens), "
                f"{len(self.val_docs)} validation docs ({n_val:,} tokens)")


def name_fraction(name: str) -> float:
    """A stable pseudo-random number in [0, 1) for a document name."""
    return int(hashlib.sha1(name.encode()).hexdigest()[:12], 16) / 16**12


def split_documents(names: list[str], docs: list[np.ndarray], val_fraction: float):
    if not 0.0 < val_fraction < 1.0:
        raise LengenError(f"validation fraction must be in (0, 1), got {val_fraction}")
    if len(docs) == 1:
        cut = int(round(len(docs[0]) * (1.0 - val_fraction)))
        return [docs[0][:cut]], [docs[0][cut:]]
    frac = [name_fraction(n) for n in names]
    is_val = [f < val_fraction for f in frac]
    if not any(is_val):
        is_val[int(np.argmin(frac))] = True
    if all(is_val):
        is_val[int(np.argmax(frac))] = False
    train = [d for d, v in zip(docs, is_val) if not v]
    val = [d for d, v in zip(docs, is_val) if v]
    return train, val


@dataclass
class TextEncoder:
    """A corpus tokenizer from any `encode(text) -> ids` function (e.g. a Hugging Face tokenizer),
    for load_documents / load_corpus. Files are decoded as UTF-8 (invalid bytes replaced). `name`
    goes into the token cache key: it must change whenever the encoding does."""
    encode: Callable[[str], list[int]]
    name: str
    EOS: int                        # separator id when long_sequences joins short documents

    def encode_array(self, data: bytes) -> np.ndarray:
        return np.asarray(self.encode(data.decode("utf-8", errors="replace")), dtype=np.int64)


def _tokenise(files, tokenizer) -> tuple[np.ndarray, np.ndarray]:
    # binaries (a NUL byte) become empty documents
    arrays = [tokenizer.encode_array(data if b"\0" not in data else b"") for data in (f.read_bytes() for f in files)]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(a) for a in arrays])
    tokens = np.concatenate(arrays) if arrays else np.zeros(0, np.uint16)
    return tokens, offsets


@dataclass
class Documents:
    source: str
    names: list[str]                # relative to the corpus root, sorted
    docs: list[np.ndarray]          # token arrays, non-empty, in name order
    eos: int
    from_cache: bool = False


def load_documents(source: str | None = None, tokenizer=None, use_cache: bool = True) -> Documents:
    """Every non-empty document of a corpus, tokenised (at most once per file set, see
    lengen.data.cache), in name order. `source`: None (the standard library), a file, a folder or
    a glob; `tokenizer`: ByteTokenizer (default) or e.g. a TextEncoder."""
    tokenizer = tokenizer or ByteTokenizer()
    src = resolve_source(source)
    names = [src.name(f) for f in src.files]
    path = cache_dir() / f"corpus-{cache_key(src.label, names, src.files, tokenizer.name)}.npz"
    arrays = load_arrays(path) if use_cache and path.exists() else None
    from_cache = arrays is not None
    if arrays is None:
        tokens, offsets = _tokenise(src.files, tokenizer)
        if use_cache:
            save_arrays(path, tokens=tokens, offsets=offsets)
    else:
        tokens, offsets = arrays["tokens"], arrays["offsets"]
    docs = [tokens[offsets[i]:offsets[i + 1]] for i in range(len(names))]
    keep = [(n, d) for n, d in zip(names, docs) if len(d)]
    if not keep:
        raise LengenError(f"corpus {src.label} is empty (no non-empty text files)")
    return Documents(src.label, [n for n, _ in keep], [d for _, d in keep], tokenizer.EOS, from_cache)


def load_corpus(source: str | None = None, val_fraction: float = 0.05, tokenizer=None,
                use_cache: bool = True) -> Corpus:
    """load_documents, split into training and validation documents (see the module docstring)."""
    docs = load_documents(source, tokenizer, use_cache)
    train, val = split_documents(docs.names, docs.docs, val_fraction)
    return Corpus(docs.source, train, val, docs.eos, docs.from_cache)
