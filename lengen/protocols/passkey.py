"""Passkey retrieval in the landmark-attention / YaRN prompt format (reference §7).

Prompt (lines joined by "\\n"):
    There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will quiz you about the important information there.
    <garbage prefix>
    The pass key is {key}. Remember it. {key} is the pass key.
    <garbage suffix>
    What is the pass key? The pass key is
The garbage is "The grass is green. The sky is blue. The sun is yellow. Here we go. There and
back again." repeated with single spaces and cut to n characters; the prefix takes p characters
(p uniform in 0..n) and the suffix n - p. The key is uniform in 1..50000 (the original's
random.randint(1, 50000)). The needle line is the only place the key appears (twice, by format).
For a target of L tokens, n is the largest garbage size whose prompt encodes to <= L tokens.
The model continues greedily for max_new_tokens tokens (10 in the original); the answer is the
first run of digits in the decoded continuation; a trial is correct when it equals the key."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from lengen.errors import LengenError
from lengen.protocols.scoring import LogitsFn

INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
         "I will quiz you about the important information there.")
GARBAGE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
QUESTION = "What is the pass key? The pass key is"
KEY_RANGE = (1, 50001)   # numpy high is exclusive: keys 1..50000, as random.randint(1, 50000)

GenerateFn = Callable[[list[int], int], list[int]]   # (prompt ids, max_new_tokens) -> new ids


def needle(key: int) -> str:
    return f"The pass key is {key}. Remember it. {key} is the pass key."


def garbage(n: int) -> str:
    reps = n // (len(GARBAGE) + 1) + 1
    return " ".join([GARBAGE] * reps)[:n]


def passkey_prompt(n_garbage: int, key: int, prefix_chars: int) -> str:
    if not 0 <= prefix_chars <= n_garbage:
        raise LengenError(f"prefix_chars {prefix_chars} must be in 0..{n_garbage}")
    return "\n".join([INTRO, garbage(prefix_chars), needle(key), garbage(n_garbage - prefix_chars), QUESTION])


def parse_answer(text: str) -> int | None:
    """The first run of digits in a generated continuation, or None."""
    m = re.search(r"\d+", text)
    return int(m.group()) if m else None


@dataclass
class PasskeyTrial:
    length: int          # target prompt length in tokens
    key: int
    n_garbage: int       # characters of filler
    prefix_chars: int    # filler characters before the needle
    prompt: str
    prompt_ids: list[int]


def largest_fitting(count: Callable[[int], int], length: int, what: str, start: int) -> int:
    """The largest n >= 0 with count(n) <= length, for token counts that grow with n: doubling from
    `start`, then binary search. LengenError when even n = 0 does not fit (`what` names the prompt)."""
    if count(0) > length:
        raise LengenError(f"{what} needs more than {length} tokens even without filler ({count(0)} tokens)")
    lo, hi = 0, start
    while count(hi) <= length:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(mid) <= length else (lo, mid)
    return lo


def fit_garbage(encode: Callable[[str], list[int]], length: int, key: int) -> int:
    """The largest filler size n (characters) whose prompt (needle in the middle) has <= length
    tokens."""
    return largest_fitting(lambda n: len(encode(passkey_prompt(n, key, n // 2))), length,
                           "a passkey prompt", max(64, length))


def make_trials(encode: Callable[[str], list[int]], length: int, trials: int, seed: int = 0) -> list[PasskeyTrial]:
    """`trials` prompts of about `length` tokens; the random stream depends on (seed, length) only,
    so adding lengths or methods never changes the prompts of another length."""
    rng = np.random.default_rng([seed, length])
    out = []
    for _ in range(trials):
        key = int(rng.integers(*KEY_RANGE))
        n = fit_garbage(encode, length, key)
        prefix = int(rng.integers(0, n + 1))
        prompt = passkey_prompt(n, key, prefix)
        ids = list(encode(prompt))
        while len(ids) > length and n > 0:  # the needle's position can shift token boundaries
            n -= 1
            prefix = min(prefix, n)
            prompt = passkey_prompt(n, key, prefix)
            ids = list(encode(prompt))
        out.append(PasskeyTrial(length, key, n, prefix, prompt, ids))
    return out


@dataclass
class PasskeyPoint:
    length: int
    accuracy: float
    correct: int
    trials: int
    mean_prompt_tokens: float

    def row(self) -> dict:
        return asdict(self)


def greedy_generate_fn(logits_fn: LogitsFn) -> GenerateFn:
    """A cache-free greedy decoder from any logits_fn (one full forward per new token); models
    with a KV cache should pass their own generate_fn."""

    def generate(ids: list[int], max_new_tokens: int) -> list[int]:
        ids, new = list(ids), []
        for _ in range(max_new_tokens):
            nxt = int(logits_fn(torch.tensor([ids], dtype=torch.long))[0, -1].argmax())
            ids.append(nxt)
            new.append(nxt)
        return new

    return generate


def passkey_accuracy(generate_fn: GenerateFn, encode: Callable[[str], list[int]],
                     decode: Callable[[list[int]], str], lengths: Sequence[int], trials: int = 20,
                     seed: int = 0, max_new_tokens: int = 10, progress=None,
                     records: list | None = None) -> list[PasskeyPoint]:
    """Accuracy at each prompt length. `records`, when given, receives one dict per trial
    (length, key, answer, generated text) for inspection."""
    if trials < 1:
        raise LengenError(f"passkey trials must be >= 1, got {trials}")
    points = []
    for L in lengths:
        correct, sizes = 0, []
        for t in make_trials(encode, L, trials, seed):
            text = decode(generate_fn(t.prompt_ids, max_new_tokens))
            answer = parse_answer(text)
            correct += answer == t.key
            sizes.append(len(t.prompt_ids))
            if records is not None:
                records.append({"length": L, "key": t.key, "answer": answer, "generated": text,
                                "prompt_tokens": len(t.prompt_ids), "prefix_chars": t.prefix_chars})
        points.append(PasskeyPoint(L, correct / trials, correct, trials, float(np.mean(sizes))))
        if progress is not None:
            progress.update(1)
    return points
