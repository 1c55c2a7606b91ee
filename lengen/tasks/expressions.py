"""The bracketed expression generator G(L) and a mod-5 evaluator, shared by
modular_arithmetic_brackets and solve_equation (which use different token ids).

Both are iterative: expressions at length 500 nest deeper than Python's recursion limit allows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODULUS = 5


@dataclass(frozen=True)
class ExprIds:
    """Token ids of one expression vocabulary. Digits are always ids 0-4."""

    plus: int
    minus: int
    lparen: int
    rparen: int
    times: int | None = None     # None: the vocabulary has no `*`
    unknown: int | None = None   # the `x` of solve_equation

    @property
    def ops(self) -> tuple[int, ...]:
        return (self.plus, self.minus) + (() if self.times is None else (self.times,))


class Draws:
    """Integer draws for G(L), taken from one block of raw random words drawn up front.

    Calling numpy's generator once per node costs microseconds per call; a single vectorized draw
    keeps a 512 x 500 batch well under a second. `word % n` is uniform up to a bias of n / 2**62.
    """

    def __init__(self, rng: np.random.Generator, count: int):
        self._words = rng.integers(0, 2**62, size=count, dtype=np.int64).tolist()
        self._next = 0

    def __call__(self, n: int) -> int:
        """One draw from U{0..n-1}."""
        word = self._words[self._next]
        self._next += 1
        return word % n


def draws_needed(length: int) -> int:
    """Upper bound of draws by generate(length): a split draws 2 and uses 3 tokens, a leaf draws 1
    and uses at least 1 token, and there is one more leaf than splits, so at most `length`."""
    return max(length, 1)


def generate(length: int, ids: ExprIds, draw: Draws) -> list[int]:
    """G(L): `d`, `-d`, `(d)`, `(-d)` for L = 1..4; else `(` G(a) op G(L-3-a) `)`, a ~ U{1..L-4}."""
    if length < 1:
        raise ValueError(f"expression length must be >= 1, got {length}")
    ops, n_ops = ids.ops, len(ids.ops)
    minus, lparen, rparen = ids.minus, ids.lparen, ids.rparen
    out: list[int] = []
    todo = [length]  # lengths still to expand (>= 1) and literal tokens stored as ~token (< 0)
    while todo:
        item = todo.pop()
        if item < 0:
            out.append(~item)
        elif item == 1:
            out.append(draw(MODULUS))
        elif item == 2:
            out += [minus, draw(MODULUS)]
        elif item == 3:
            out += [lparen, draw(MODULUS), rparen]
        elif item == 4:
            out += [lparen, minus, draw(MODULUS), rparen]
        else:
            a = 1 + draw(item - 4)
            op = ops[draw(n_ops)]
            out.append(lparen)
            todo += [~rparen, item - 3 - a, ~op, a]  # popped in reverse: G(a), op, G(b), `)`
    return out


def evaluate(tokens, ids: ExprIds, unknown_value: int = 0) -> int:
    """Value mod 5 of an expression with + - * (binary, `*` binding tighter), unary minus and
    brackets; the unknown token counts as `unknown_value`. `tokens`: a list of Python ints."""
    # Per bracket level: acc = finished +/- terms, term = running product (None before the first
    # operand), op = operator before the next operand, neg = pending unary minus.
    plus, minus, times, ops = ids.plus, ids.minus, ids.times, ids.ops
    lparen, rparen, unknown = ids.lparen, ids.rparen, ids.unknown
    stack = []
    acc, term, op, neg, want_operand = 0, None, plus, False, True
    for t in tokens:
        if (t < MODULUS or t == unknown) and want_operand:
            value = t if t < MODULUS else unknown_value
        elif t == lparen and want_operand:
            stack.append((acc, term, op, neg))
            acc, term, op, neg, want_operand = 0, None, plus, False, True
            continue
        elif t == rparen:
            if term is None or want_operand or not stack:
                raise ValueError(f"malformed expression at `)`: {list(tokens)}")
            value = acc + term
            acc, term, op, neg = stack.pop()
        elif t == minus and want_operand:
            neg = not neg
            continue
        elif t in ops and not want_operand:
            op, want_operand = t, True
            continue
        else:
            raise ValueError(f"unexpected token {t} in expression {list(tokens)}")
        if neg:
            value, neg = -value, False
        if op == times:
            term = term * value % MODULUS
        else:
            if term is not None:
                acc += term
            term = value if op == plus else -value
        want_operand = False
    if term is None or want_operand or stack:
        raise ValueError(f"incomplete expression: {list(tokens)}")
    return (acc + term) % MODULUS
