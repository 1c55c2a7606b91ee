"""How a problem becomes tokens: [BOS] a OP b (OP c ...) = c [EOS], no spaces. Each token also
gets its significance (a digit worth 10^t has t; operators and '=' OPERATOR; BOS and EOS
BOUNDARY), which position coupling turns into ids.

  reversed  every number least significant digit first, unpadded (McLeish et al.'s --reverse_all):
            98+45=143 -> 89+54=341
  padded    operands in plain order, zero-padded to the longest; the answer zero-padded to the
            widest answer such operands can have, reversed (Cho et al.): 57+68 -> 57+68=521
  plain     every number most significant digit first, unpadded: 98+45=143

In `reversed` and `padded` the answer's k-th token is worth 10^k whatever the answer's length, so
the significance of a token being decoded is known before it is; in `plain` it is not."""

from __future__ import annotations

from dataclasses import dataclass

from lengen.arith.problem import Problem
from lengen.arith.vocab import BOS, BOUNDARY, EOS, EQUALS, OPERATOR, OPERATOR_TOKENS

FORMATS = ("reversed", "padded", "plain")


@dataclass(frozen=True)
class Encoded:
    tokens: list[int]          # BOS ... '=' answer EOS
    significance: list[int]    # one per token
    prompt_length: int         # tokens up to and with '='; the answer and EOS follow
    answer_width: int          # digits of the widest answer operands of these lengths can have


def _number(value: int, width: int, reverse: bool) -> tuple[list[int], list[int]]:
    """Digits of `value` zero-padded to `width` (0: unpadded) and their significance."""
    text = str(value).zfill(width)
    digits = [int(ch) for ch in text]
    places = list(range(len(text) - 1, -1, -1))
    if reverse:
        digits, places = digits[::-1], places[::-1]
    return digits, places


def encode(problem: Problem, fmt: str) -> Encoded:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    operand_width = max(len(str(x)) for x in problem.operands) if fmt == "padded" else 0
    tokens, sig = [BOS], [BOUNDARY]
    for i, operand in enumerate(problem.operands):
        if i:
            tokens.append(OPERATOR_TOKENS[problem.operator])
            sig.append(OPERATOR)
        digits, places = _number(operand, operand_width, reverse=fmt == "reversed")
        tokens += digits
        sig += places
    tokens.append(EQUALS)
    sig.append(OPERATOR)
    prompt_length = len(tokens)
    digits, places = _number(problem.answer, problem.answer_width if fmt == "padded" else 0,
                             reverse=fmt != "plain")
    return Encoded(tokens + digits + [EOS], sig + places + [BOUNDARY], prompt_length, problem.answer_width)


def answer_significance(fmt: str, slot: int) -> int | None:
    """The significance of the answer's `slot`-th token (0 = first after '='), known before it is
    decoded, or None when it depends on the answer's length (`plain`)."""
    return None if fmt == "plain" else slot
