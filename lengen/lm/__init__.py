"""Decoder-only byte-level language models: a KV cache of un-rotated keys, training-free RoPE
extrapolation at evaluation time, training (lengen.lm.train, on the corpus-training loop
lengen.training.corpus_loop that the masked LM shares) and evaluation (lengen.lm.evaluate)."""

from lengen.data.tokenizer import ByteTokenizer
from lengen.lm.cache import DecoderCache
from lengen.lm.config import LMConfig, default_lm_model
from lengen.lm.model import DecoderLM

__all__ = ["ByteTokenizer", "DecoderCache", "DecoderLM", "LMConfig", "default_lm_model"]
