"""The RULER-style tasks: each draws its content from a seeded Generator once, then renders a
prompt for any filler size n; the largest n whose prompt encodes to <= L tokens is used."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from lengen.errors import LengenError
from lengen.protocols.passkey import largest_fitting
from lengen.protocols.ruler import text

Encode = Callable[[str], list[int]]

NIAH_INTRO = ("Some special magic {kind} are hidden within the following text. Make sure to memorize it. "
              "I will quiz you about the {kind} afterwards.")
NIAH_NEEDLE = "One of the special magic {kind} for {key} is: {value}."
NIAH_QUESTION = ("What are all the special magic {kind} for {query} mentioned in the provided text? "
                 "The special magic {kind} for {query} mentioned in the provided text are")
VT_INTRO = "Memorize and track the chain(s) of variable assignment hidden in the following text."
VT_QUESTION = ("Question: Find all variables that are assigned the value {value} in the text above. "
               "Answer: According to the chain(s) of variable assignment in the text above, {count} "
               "variables are assigned the value {value}, they are:")
CWE_INTRO = ("Below is a numbered list of words. In these words, some appear more often than others. "
             "Memorize the ones that appear most often.")
CWE_QUESTION = ("Question: What are the {count} most common words in the above list? "
                "Answer: The top {count} words that appear most often in the list are:")

# needle tasks: (value kind, keys, values per key, keys queried)
NIAH = {
    "niah_single": ("numbers", 1, 1, 1),
    "niah_single_word": ("words", 1, 1, 1),
    "niah_single_uuid": ("uuids", 1, 1, 1),
    "niah_multikey": ("numbers", 4, 1, 1),     # three distractor needles with other keys
    "niah_multivalue": ("numbers", 1, 4, 1),   # four values for the one key: all expected
    "niah_multiquery": ("numbers", 4, 1, 4),   # four keys queried: every value expected
}
VT_HOPS = 4            # one chain: VAR X1 = value, then four assignments X_i = X_{i-1}
CWE_COMMON = 10        # common words to name
CWE_FREQUENCIES = ((30, 3), (10, 2), (2, 1))   # (common, uncommon) repetitions, RULER's first
TASKS = (*NIAH, "vt", "cwe")


@dataclass
class Draft:
    """A task's content, drawn once; render(n) is the prompt with filler size n."""
    answers: list[str]
    render: Callable[[int], str]
    meta: dict = field(default_factory=dict)


@dataclass
class RulerTrial:
    task: str
    length: int              # target prompt length in tokens
    answers: list[str]       # expected answers; the score is the fraction found
    filler: int              # filler sentences (cwe: uncommon words)
    prompt: str
    prompt_ids: list[int]
    max_new_tokens: int


def _with_needles(needles: list[str], depths: list[float], n: int) -> str:
    """n filler sentences with each needle inserted at its depth (a fraction of the sentences),
    needles at the same point kept in order."""
    sentences = text.filler(n)
    at = [round(d * n) for d in depths]
    out = []
    for i in range(n + 1):
        out += [nd for nd, a in zip(needles, at) if a == i]
        if i < n:
            out.append(sentences[i])
    return " ".join(out)


def _niah(task: str, rng: np.random.Generator) -> Draft:
    kind, n_keys, n_values, n_queries = NIAH[task]
    keys = text.distinct(lambda: text.key_word(rng), n_keys)
    if kind == "numbers":
        draw = lambda: text.number(rng)   # noqa: E731
    elif kind == "uuids":
        draw = lambda: text.uuid_value(rng)   # noqa: E731
    else:
        used = {k.split("-")[1] for k in keys}
        draw = lambda: text.NOUNS[rng.integers(len(text.NOUNS))]   # noqa: E731
    values = text.distinct(draw, n_keys * n_values, used if kind == "words" else None)
    pairs = [(k, values[i * n_values + j]) for i, k in enumerate(keys) for j in range(n_values)]
    order = rng.permutation(len(pairs))
    pairs = [pairs[i] for i in order]
    needles = [NIAH_NEEDLE.format(kind=kind, key=k, value=v) for k, v in pairs]
    depths = sorted(float(d) for d in rng.random(len(needles)))
    queried = keys[:n_queries]
    query = queried[0] if n_queries == 1 else ", ".join(queried[:-1]) + ", and " + queried[-1]
    answers = [v for k, v in pairs if k in queried]

    def render(n: int) -> str:
        return "\n".join([NIAH_INTRO.format(kind=kind), _with_needles(needles, depths, n),
                          NIAH_QUESTION.format(kind=kind, query=query)])

    return Draft(answers, render, {"query": query})


def _vt(rng: np.random.Generator) -> Draft:
    names = text.distinct(lambda: text.variable(rng), VT_HOPS + 1)
    value = str(int(rng.integers(10_000, 100_000)))
    needles = [f"VAR {names[0]} = {value}."] + [f"VAR {b} = {a}." for a, b in zip(names, names[1:])]
    depths = sorted(float(d) for d in rng.random(len(needles)))   # in order: the chain reads forward

    def render(n: int) -> str:
        return "\n".join([VT_INTRO, _with_needles(needles, depths, n),
                          VT_QUESTION.format(value=value, count=len(names))])

    return Draft(names, render, {"value": value})


def _cwe(rng: np.random.Generator, frequencies: tuple[int, int]) -> Draft:
    freq_common, freq_rare = frequencies
    words = [text.WORDS[i] for i in rng.permutation(len(text.WORDS))]
    common, rare = words[:CWE_COMMON], words[CWE_COMMON:]
    extra = text.compounds()
    rare += [extra[i] for i in rng.permutation(len(extra))]
    shuffle_seed = int(rng.integers(2**32))

    def render(n: int) -> str:
        if n > len(rare):
            raise LengenError(f"the common-words task has only {len(rare)} distinct words")
        listed = common * freq_common + rare[:n] * freq_rare
        listed = [listed[i] for i in np.random.default_rng(shuffle_seed).permutation(len(listed))]
        numbered = " ".join(f"{i + 1}. {w}" for i, w in enumerate(listed))
        return "\n".join([CWE_INTRO, numbered, CWE_QUESTION.format(count=CWE_COMMON)])

    return Draft(common, render, {"frequencies": frequencies})


def fit(render: Callable[[int], str], encode: Encode, length: int, task: str) -> int:
    """The largest n whose prompt has <= length tokens (raises when even n = 0 does not fit)."""
    return largest_fitting(lambda n: len(encode(render(n))), length, f"a ruler {task} prompt", max(16, length // 4))


def task_rng(seed: int, task: str, length: int) -> np.random.Generator:
    """The prompts' random stream: (seed, task, length) only, so other tasks, lengths or methods
    never change them (crc32: stable across runs, unlike hash())."""
    return np.random.default_rng([seed, zlib.crc32(task.encode()), length])


def answer_tokens(encode: Encode, answers: list[str]) -> int:
    """max_new_tokens for a trial: the answers as a comma-separated list, plus a quarter and 8
    tokens of slack for a lead-in ("1. ", a leading space, ...)."""
    n = len(encode(" " + ", ".join(answers)))
    return n + n // 4 + 8


def make_ruler_trials(task: str, encode: Encode, length: int, trials: int, seed: int = 0) -> list[RulerTrial]:
    if task not in TASKS:
        raise LengenError(f"unknown ruler task {task!r}; valid: {', '.join(TASKS)}")
    rng = task_rng(seed, task, length)
    out = []
    for _ in range(trials):
        if task == "cwe":
            # RULER's frequencies (30 / 3) where they leave room for at least as many uncommon
            # words as common ones, fewer repetitions at short lengths
            for frequencies in CWE_FREQUENCIES:
                state = rng.bit_generator.state
                draft = _cwe(rng, frequencies)
                try:
                    n = fit(draft.render, encode, length, task)
                except LengenError:
                    n = -1
                if n >= CWE_COMMON or frequencies == CWE_FREQUENCIES[-1]:
                    break
                rng.bit_generator.state = state   # the same words at the next frequencies
            if n < 0:
                n = fit(draft.render, encode, length, task)   # raises with the reason
        else:
            draft = _vt(rng) if task == "vt" else _niah(task, rng)
            n = fit(draft.render, encode, length, task)
        prompt = draft.render(n)
        ids = list(encode(prompt))
        out.append(RulerTrial(task, length, draft.answers, n, prompt, ids,
                              answer_tokens(encode, draft.answers)))
    return out
