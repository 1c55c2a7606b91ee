"""A bidirectional byte-level masked language model (BERT-style masking) for Su's MLM
length-extrapolation experiment (kexue.fm/archives/9444; docs/mlm.md)."""

from lengen.mlm.config import MLMConfig
from lengen.mlm.masking import MASK_ID, masked_count, mask_tokens

__all__ = ["MLMConfig", "MASK_ID", "mask_tokens", "masked_count"]
