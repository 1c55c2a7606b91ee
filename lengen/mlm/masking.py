"""BERT masking (Devlin et al. 2019), as in docs/mlm.md (Su's protocol):

  * per sequence, exactly k = round(rate * T) positions (half rounds up, at least 1) are chosen
    uniformly without replacement (not a Bernoulli draw per token: every window of a length
    scores the same number of tokens);
  * each chosen position independently becomes MASK with probability 0.8, a uniformly random
    byte (0..255) with probability 0.1, and keeps its token with probability 0.1;
  * targets are the original tokens at chosen positions and IGNORE (-100, cross_entropy's
    ignore_index) everywhere else; unchosen inputs are unchanged.

Everything is drawn from the torch.Generator passed in (on the CPU), so masks are a function of
its seed: training resumes exactly and evaluation gives every variant the same masks."""

from __future__ import annotations

import math

import torch

from lengen.data.tokenizer import ByteTokenizer

#: the [MASK] input id: one past the byte tokenizer's ids (bytes 0..255, EOS 256)
MASK_ID = ByteTokenizer.vocab_size
#: input vocabulary of the masked LM (bytes, EOS, MASK); the output classes are bytes and EOS
INPUT_VOCAB = ByteTokenizer.vocab_size + 1
IGNORE = -100
RANDOM_BYTES = 256  # random replacements are bytes (never EOS or MASK)


def masked_count(length: int, rate: float) -> int:
    """Chosen positions per sequence of `length`: round(rate * length), half up, at least 1."""
    return max(1, min(length, int(math.floor(rate * length + 0.5))))


def mask_tokens(ids: torch.Tensor, generator: torch.Generator, rate: float = 0.15,
                split: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> tuple[torch.Tensor, torch.Tensor]:
    """ids [B, T] (int64, CPU) -> (inputs [B, T], targets [B, T] with IGNORE at unchosen positions)."""
    if ids.dim() != 2:
        raise ValueError(f"ids must be [B, T], got {tuple(ids.shape)}")
    B, T = ids.shape
    k = masked_count(T, rate)
    # the k smallest of T uniform scores: a uniform k-subset without replacement, per row
    scores = torch.rand(B, T, generator=generator)
    chosen_idx = scores.argsort(dim=1)[:, :k]
    chosen = torch.zeros(B, T, dtype=torch.bool).scatter_(1, chosen_idx, True)
    u = torch.rand(B, T, generator=generator)
    random_ids = torch.randint(0, RANDOM_BYTES, (B, T), generator=generator)
    p_mask, p_random = split[0], split[0] + split[1]
    inputs = ids.clone()
    to_mask = chosen & (u < p_mask)
    to_random = chosen & (u >= p_mask) & (u < p_random)
    inputs[to_mask] = MASK_ID
    inputs[to_random] = random_ids[to_random]
    targets = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
    return inputs, targets
