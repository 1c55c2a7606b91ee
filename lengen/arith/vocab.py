"""The arithmetic tasks' tokens: the ten digits are their own ids (token 7 is the digit 7), then the
operators, '=', BOS, EOS and PAD. One vocabulary for every task and format, so a model's head and
the decoding never depend on the task."""

from __future__ import annotations

DIGITS = tuple("0123456789")
PLUS, TIMES, EQUALS, BOS, EOS, PAD = 10, 11, 12, 13, 14, 15
SYMBOLS = (*DIGITS, "+", "*", "=", "<s>", "</s>", "_")
VOCAB_SIZE = len(SYMBOLS)
OPERATOR_TOKENS = {"+": PLUS, "*": TIMES}

#: significance of a token that is not a digit (digits carry their place t >= 0: worth 10^t)
OPERATOR, BOUNDARY = -1, -2   # '+', '*', '=' | BOS, EOS, PAD


def is_digit(token: int) -> bool:
    return 0 <= token <= 9


def decode(tokens) -> str:
    """Tokens as text: digits, '+', '*', '=', <s>, </s>, '_' (padding)."""
    return "".join(SYMBOLS[int(t)] for t in tokens)
