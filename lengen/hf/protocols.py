"""Long-context evaluation protocols, independent of the model type.

A model enters as callables, so the same code scores Hugging Face models and lengen's own LMs:
  * `nll_fn(ids [1, T] LongTensor, last) -> [last] float`: the negative log-likelihood of each of
    the final `last` tokens of ids, each predicted from all tokens before it (`nll_from_logits`
    builds one from a `logits_fn(ids) -> logits [1, T, V]`);
  * `greedy_fn(ids: list[int], max_new_tokens) -> list[int]`: greedy continuation (passkey).

Protocols (training_free.md section 7):
  * ppl: one forward pass over the first `length` tokens of each document, no sliding window;
    perplexity = exp(token-weighted mean NLL over documents).
  * last-segment (ReRoPE): the context is the final `length` tokens of each document and only its
    final `segment` tokens are scored, so every length is compared on the same targets.
  * passkey (landmark attention / YaRN): a key hidden at a random depth in filler text, greedy
    answer, accuracy over `trials` prompts of about `length` tokens with a fixed seed.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

NllFn = Callable[[torch.Tensor, int], torch.Tensor]


def nll_from_logits(logits_fn: Callable[[torch.Tensor], torch.Tensor]) -> NllFn:
    """Adapt `logits_fn(ids [1, T]) -> [1, T, V]` to the nll_fn convention."""

    def nll(ids: torch.Tensor, last: int) -> torch.Tensor:
        logits = logits_fn(ids)[0, -(last + 1):-1].float()
        return F.cross_entropy(logits, ids[0, -last:], reduction="none")

    return nll


def _mean_nll(nll_fn: NllFn, windows: Sequence[Sequence[int]], last: int | None, progress=None) -> float:
    total, count = 0.0, 0
    for window in windows:
        ids = torch.as_tensor(list(window), dtype=torch.long)[None]
        k = ids.shape[1] - 1 if last is None else last
        values = nll_fn(ids, k).double()
        total, count = total + float(values.sum()), count + values.numel()
        if progress is not None:
            progress(1)
    return total / max(count, 1)


def perplexity(nll_fn: NllFn, docs: Sequence[Sequence[int]], length: int, progress=None) -> float:
    """exp(mean NLL) of a single forward pass over the first `length` tokens of each document
    that has at least `length` tokens (every token after the first is scored)."""
    if length < 2:
        raise ValueError("length must be >= 2")
    windows = [doc[:length] for doc in docs if len(doc) >= length]
    if not windows:
        return math.nan
    return math.exp(_mean_nll(nll_fn, windows, None, progress))


def last_segment_perplexity(nll_fn: NllFn, docs: Sequence[Sequence[int]], length: int, segment: int,
                            progress=None) -> float:
    """exp(mean NLL) of the final `segment` tokens of each document, given the final `length`
    tokens as context (the same targets at every length)."""
    if not 0 < segment < length:
        raise ValueError(f"segment must be in [1, length), got segment={segment}, length={length}")
    windows = [doc[len(doc) - length:] for doc in docs if len(doc) >= length]
    if not windows:
        return math.nan
    return math.exp(_mean_nll(nll_fn, windows, segment, progress))


# --- passkey retrieval -----------------------------------------------------------------------

TASK = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
        "them. I will quiz you about the important information there.")
GARBAGE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
QUESTION = "What is the pass key? The pass key is"


def passkey_prompt(n_garbage: int, key: int, prefix_chars: int) -> str:
    """The landmark-attention prompt with `n_garbage` filler characters, `prefix_chars` of them
    before the key line (both filler parts start at the start of the repeated text, as there)."""
    filler = " ".join([GARBAGE] * (n_garbage // len(GARBAGE) + 2))[:n_garbage]
    info = f"The pass key is {key}. Remember it. {key} is the pass key."
    return "\n".join([TASK, filler[:prefix_chars], info, filler[:n_garbage - prefix_chars], QUESTION])


def fit_prompt(encode: Callable[[str], list[int]], length: int, key: int, depth: float) -> list[int]:
    """Token ids of the passkey prompt with as much filler as fits in `length` tokens, the key
    line at relative depth `depth` in [0, 1] of the filler."""
    def build(n: int) -> list[int]:
        return encode(passkey_prompt(n, key, int(depth * n)))

    fixed = len(build(0))
    if fixed > length:
        raise ValueError(f"length {length} is shorter than the bare passkey prompt ({fixed} tokens)")
    probe = 4000
    per_char = max((len(build(probe)) - fixed) / probe, 1e-3)
    n = int((length - fixed) / per_char)
    ids = build(n)
    while len(ids) > length:   # tokenization is not exactly linear: shrink until it fits
        n = max(0, n - max(1, int((len(ids) - length) / per_char)))
        ids = build(n)
    return ids


def parse_answer(text: str) -> int | None:
    match = re.search(r"\d+", text)
    return int(match.group()) if match else None


def passkey_accuracy(greedy_fn: Callable[[list[int], int], list[int]], encode: Callable[[str], list[int]],
                     decode: Callable[[list[int]], str], length: int, trials: int, seed: int = 0,
                     max_new_tokens: int = 10, progress=None) -> float:
    """Fraction of `trials` prompts of <= `length` tokens whose greedy answer is the key. Keys
    (1..50000) and depths come from numpy.random.default_rng([seed, length]): every method sees
    the same prompts at a given length."""
    rng = np.random.default_rng([seed, length])
    correct = 0
    for _ in range(trials):
        key, depth = int(rng.integers(1, 50001)), float(rng.random())
        ids = fit_prompt(encode, length, key, depth)
        answer = parse_answer(decode(greedy_fn(ids, max_new_tokens)))
        correct += int(answer == key)
        if progress is not None:
            progress(1)
    return correct / trials
