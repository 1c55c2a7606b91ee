"""Byte-level tokens: ids 0..255 are the bytes, 256 ends a document. No vocabulary to train or
download, every file is representable, and a token is exactly one byte (so perplexities are per
byte and easy to compare with compression rates)."""

from __future__ import annotations

import numpy as np


class ByteTokenizer:
    name = "bytes-v1"   # goes into corpus cache keys: change it when encoding changes
    EOS = 256           # document separator, never produced by encode()
    vocab_size = 257

    def encode(self, text: str | bytes) -> list[int]:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        return list(data)

    def encode_array(self, data: bytes) -> np.ndarray:
        """Raw file bytes -> uint16 token array (uint16 leaves room for the EOS id)."""
        return np.frombuffer(data, dtype=np.uint8).astype(np.uint16)

    def decode(self, ids) -> str:
        """Token ids -> text; special ids are dropped, invalid UTF-8 is replaced."""
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")
