"""Corpora for language models: sources (files, folders, globs, the standard library), an
on-disk token cache, a deterministic train/validation split and token windows."""

from lengen.data.batches import consecutive_windows, long_sequences, sample_windows
from lengen.data.corpus import Corpus, Documents, TextEncoder, load_corpus, load_documents
from lengen.data.sources import resolve_source, stdlib_root
from lengen.data.tokenizer import ByteTokenizer

__all__ = ["ByteTokenizer", "Corpus", "load_corpus", "Documents", "load_documents", "TextEncoder", "resolve_source", "stdlib_root", "sample_windows",
           "consecutive_windows", "long_sequences"]
