"""Input distributions of the CHE tasks, from che_tasks.md: the exact set of inputs each sampler can
produce at small lengths, uniformity where the spec makes it uniform, and the structural facts at
longer lengths (operands, separators, masked slots, balanced brackets, the single unknown)."""

import itertools
from collections import Counter

import numpy as np
import pytest

from lengen.tasks import get_task
from lengen.tasks.expressions import ExprIds, evaluate

# ---------------------------------------------------------------------------------------------
# The support of each sampler, enumerated from the spec (small lengths only).

def _le(value, width):
    return [(value >> i) & 1 for i in range(width)]


def _expressions(L, ops, lp, rp, minus=6):
    """All strings of G(L) as token tuples (recursive: fine at the small lengths used here)."""
    if L == 1:
        return [(d,) for d in range(5)]
    if L == 2:
        return [(minus, d) for d in range(5)]
    if L == 3:
        return [(lp, d, rp) for d in range(5)]
    if L == 4:
        return [(lp, minus, d, rp) for d in range(5)]
    out = []
    for a in range(1, L - 3):
        for left in _expressions(a, ops, lp, rp):
            for right in _expressions(L - 3 - a, ops, lp, rp):
                out += [(lp, *left, op, *right, rp) for op in ops]
    return out


EQ_SYMBOLS = "01234+-()x="


def support(name, L):
    if name in ("even_pairs", "parity_check", "reverse_string", "duplicate_string", "odds_first"):
        return set(itertools.product((0, 1), repeat=L))
    if name == "cycle_navigation":
        return set(itertools.product((0, 1, 2), repeat=L))
    if name == "bucket_sort":
        return set(itertools.product(range(5), repeat=L))
    if name == "modular_arithmetic":
        n = L if L % 2 else L - 1
        slots = [range(5) if i % 2 == 0 else (5, 6, 7) for i in range(n)]
        return set(itertools.product(*slots))
    if name == "stack_manipulation":
        if L == 1:
            return {(0,), (1,)}
        return {s + a for k in range(1, L)
                for s in itertools.product((0, 1), repeat=k)
                for a in itertools.product((2, 3, 4), repeat=L - k)}
    if name == "modular_arithmetic_brackets":
        return set(_expressions(L, (5, 6, 7), 8, 9))
    if name == "solve_equation":
        if L < 3:
            return {(0,) * L}
        out = set()
        for expr in _expressions(L - 2, (5, 6), 7, 8):
            v = eval("".join(EQ_SYMBOLS[t] for t in expr)) % 5
            for j, t in enumerate(expr):
                if t < 5:
                    out.add(expr[:j] + (9,) + expr[j + 1:] + (10, v))
        return out
    if name == "missing_duplicate_string":
        if L == 1:
            return {(1,)}
        half, out = L // 2, set()
        for s in itertools.product((0, 1), repeat=half):
            for j in range(2 * half):
                w = list(s + s)
                w[j] = 2
                out.add(tuple(w) + ((3,) if L % 2 else ()))
        return out
    if name in ("binary_addition", "binary_multiplication"):
        if L <= 2:
            return {tuple(_le(n, L)) for n in range(2**L - 1)}
        return {tuple(_le(n, a) + [2] + _le(m, L - 1 - a))
                for a in range(1, L - 1) for n in range(1, 2**a) for m in range(1, 2 ** (L - 1 - a))}
    if name == "compute_sqrt":
        return {tuple(int(c) for c in format(n, f"0{L}b")) for n in range(1, 2**L)}
    raise KeyError(name)


# Lengths whose support is small enough to be hit entirely by 4000 draws.
SUPPORT_LENGTHS = {
    "even_pairs": [1, 2, 5], "parity_check": [1, 3, 6], "reverse_string": [1, 4, 6],
    "duplicate_string": [2, 6], "odds_first": [3, 6], "cycle_navigation": [1, 2, 4],
    "bucket_sort": [1, 3], "modular_arithmetic": [1, 2, 3, 4],
    "stack_manipulation": [1, 2, 3, 4], "modular_arithmetic_brackets": [1, 2, 3, 4, 5, 6],
    "solve_equation": [1, 2, 3, 4, 5, 6, 7, 8], "missing_duplicate_string": [1, 2, 3, 4, 7],
    "binary_addition": [1, 2, 3, 4, 5, 6], "binary_multiplication": [1, 2, 3, 5, 6],
    "compute_sqrt": [1, 2, 3, 6],
}
# Samplers that are uniform over their support (in the other ones a length split comes first).
UNIFORM = {"even_pairs", "parity_check", "reverse_string", "duplicate_string", "odds_first",
           "cycle_navigation", "bucket_sort", "modular_arithmetic", "missing_duplicate_string",
           "compute_sqrt"}


@pytest.mark.parametrize("name", list(SUPPORT_LENGTHS))
def test_sampled_inputs_cover_exactly_the_spec_support(name):
    task = get_task(name)
    rng = np.random.default_rng(11)
    for L in SUPPORT_LENGTHS[name]:
        expected = support(name, L)
        assert len(expected) <= 250
        counts = Counter(map(tuple, task.sample(4000, L, rng).inputs.tolist()))
        assert set(counts) == expected, (name, L)
        if name in UNIFORM:  # each count within 6 standard deviations of its mean
            mean = 4000 / len(expected)
            assert max(abs(c - mean) for c in counts.values()) < 6 * mean**0.5 + 2, (name, L)


# ---------------------------------------------------------------------------------------------
# Distribution facts at longer lengths.

def _fraction(values, v):
    return float(np.mean(np.asarray(values) == v))


@pytest.mark.parametrize("name", ["even_pairs", "parity_check", "reverse_string", "duplicate_string",
                                  "odds_first", "compute_sqrt"])
def test_bits_are_fair(name):
    x = get_task(name).sample(256, 200, np.random.default_rng(0)).inputs.numpy()
    assert abs(x.mean() - 0.5) < 0.01


def test_symbol_frequencies_are_uniform():
    rng = np.random.default_rng(1)
    x = get_task("cycle_navigation").sample(256, 200, rng).inputs.numpy()
    assert all(abs(_fraction(x, v) - 1 / 3) < 0.01 for v in range(3))
    x = get_task("bucket_sort").sample(256, 200, rng).inputs.numpy()
    assert all(abs(_fraction(x, v) - 1 / 5) < 0.01 for v in range(5))
    x = get_task("modular_arithmetic").sample(256, 201, rng).inputs.numpy()
    assert all(abs(_fraction(x[:, 0::2], v) - 1 / 5) < 0.01 for v in range(5))
    assert all(abs(_fraction(x[:, 1::2], v) - 1 / 3) < 0.015 for v in (5, 6, 7))


@pytest.mark.parametrize("L", [1, 2, 10, 11, 500])
def test_modular_arithmetic_forces_odd_length(L):
    task = get_task("modular_arithmetic")
    x = task.sample(8, L, np.random.default_rng(0)).inputs.numpy()
    assert x.shape[1] == (L if L % 2 else L - 1) and x.shape[1] % 2 == 1
    assert np.all(x[:, 0::2] < 5) and np.all((x[:, 1::2] >= 5) & (x[:, 1::2] <= 7))


def test_stack_initial_size_and_actions_uniform():
    L = 6
    x = get_task("stack_manipulation").sample(6000, L, np.random.default_rng(2)).inputs.numpy()
    k = np.argmax(x >= 2, axis=1)  # number of leading stack bits
    assert np.all(x[:, -1] >= 2)  # at least one action
    assert np.all([np.all(row[:kk] < 2) and np.all(row[kk:] >= 2) for row, kk in zip(x, k)])
    assert all(abs(_fraction(k, v) - 1 / (L - 1)) < 0.02 for v in range(1, L))
    actions = x[x >= 2]
    assert all(abs(_fraction(actions, v) - 1 / 3) < 0.02 for v in (2, 3, 4))


def _check_balanced(expr, lp, rp):
    depth = 0
    for t in expr:
        depth += (t == lp) - (t == rp)
        assert depth >= 0
    assert depth == 0


def _top_level_split(expr, lp, rp, ops):
    """Length a of the left operand of the outermost `( G(a) op G(b) )`."""
    depth = 0
    for i, t in enumerate(expr):
        depth += (t == lp) - (t == rp)
        if depth == 1 and t in ops and i > 1:  # a `-` right after `(` would be unary
            return i - 1
    raise AssertionError(expr)


def test_brackets_structure_and_split_distribution():
    task = get_task("modular_arithmetic_brackets")
    rng = np.random.default_rng(3)
    for L in [7, 30, 500]:
        x = task.sample(200, L, rng).inputs.numpy()
        assert np.all(x != 10)  # the unused id
        for row in x.tolist():
            _check_balanced(row, 8, 9)
            assert row[0] == 8 and row[-1] == 9
    L = 9  # a ~ U{1..5}
    x = task.sample(5000, L, rng).inputs.tolist()
    splits = [_top_level_split(row, 8, 9, (5, 6, 7)) for row in x]
    assert all(abs(_fraction(splits, a) - 1 / 5) < 0.025 for a in range(1, 6))
    x = np.array(task.sample(500, 100, rng).inputs.tolist())
    ops = np.array([t for row in x.tolist() for i, t in enumerate(row)
                    if t in (5, 7) or (t == 6 and row[i - 1] not in (8, 5, 6, 7))])
    assert all(abs(_fraction(ops, v) - 1 / 3) < 0.03 for v in (5, 6, 7))


def test_solve_equation_structure():
    task = get_task("solve_equation")
    rng = np.random.default_rng(4)
    for L in [1, 2]:
        batch = task.sample(10, L, rng)
        assert batch.inputs.eq(0).all() and batch.targets.eq(0).all()
    for L in [3, 4, 9, 40, 500]:
        batch = task.sample(100, L, rng)
        for row in batch.inputs.tolist():
            assert row.count(9) == 1  # one unknown
            assert row.count(10) == 1 and row[L - 2] == 10  # `=` at L-2
            assert row[-1] < 5  # v is a digit
            assert all(t in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9) for t in row[:-2])
            _check_balanced(row[:-2], 7, 8)
    # E = (d op d) at L = 7: j ~ U{0..4} steps to the first digit at or after j, cyclically, so x
    # replaces position 1 for j in {0, 1, 4} and position 3 for j in {2, 3}.
    x = task.sample(5000, 7, rng).inputs.numpy()
    where = np.argmax(x == 9, axis=1)
    assert set(where.tolist()) == {1, 3}
    assert abs(_fraction(where, 1) - 3 / 5) < 0.025
    # The hidden digit is uniform.
    y = task.sample(5000, 30, rng).targets.numpy()
    assert all(abs(_fraction(y, v) - 1 / 5) < 0.025 for v in range(5))


@pytest.mark.parametrize("L", [2, 3, 7, 40, 501])
def test_missing_duplicate_structure(L):
    x = get_task("missing_duplicate_string").sample(3000, L, np.random.default_rng(5)).inputs.numpy()
    half = L // 2
    body = x[:, : 2 * half]
    assert np.all((body == 2).sum(axis=1) == 1)  # exactly one masked slot
    assert np.all(body != 3)
    assert np.all(x[:, -1] == 3) if L % 2 else np.all(x != 3)
    a, b = body[:, :half], body[:, half:]
    visible = (a != 2) & (b != 2)
    assert np.array_equal(a[visible], b[visible])  # a string written twice
    if 2 * half <= 14:
        j = np.argmax(body == 2, axis=1)
        assert all(abs(_fraction(j, v) - 1 / (2 * half)) < 0.03 for v in range(2 * half))


@pytest.mark.parametrize("name", ["binary_addition", "binary_multiplication"])
def test_binary_operands(name):
    task = get_task(name)
    rng = np.random.default_rng(6)
    for L in [1, 2]:
        x = task.sample(3000, L, rng).inputs.numpy()
        assert np.all(x < 2)  # no separator
        values = (x * (1 << np.arange(L))).sum(axis=1)
        assert values.max() <= 2**L - 2
        if L == 2:
            assert all(abs(_fraction(values, v) - 1 / 3) < 0.03 for v in range(3))
    for L in [3, 6, 25, 500]:
        x = task.sample(300, L, rng).inputs.numpy()
        assert np.all((x == 2).sum(axis=1) == 1)  # the separator exactly once
        a = np.argmax(x == 2, axis=1)
        assert a.min() >= 1 and a.max() <= L - 2
        for row, s in zip(x, a):
            assert row[:s].any() and row[s + 1:].any()  # nonzero operands
    x = task.sample(8000, 6, rng).inputs.numpy()
    a = np.argmax(x == 2, axis=1)  # a ~ U{1..4}
    assert all(abs(_fraction(a, v) - 1 / 4) < 0.02 for v in range(1, 5))
    # Given a = 2 (b = 3), n ~ U{1..3} and m ~ U{1..7}.
    rows = x[a == 2]
    n = rows[:, 0] + 2 * rows[:, 1]
    m = rows[:, 3] + 2 * rows[:, 4] + 4 * rows[:, 5]
    assert all(abs(_fraction(n, v) - 1 / 3) < 0.04 for v in range(1, 4))
    assert all(abs(_fraction(m, v) - 1 / 7) < 0.04 for v in range(1, 8))
    x = task.sample(200, 400, rng).inputs.numpy()
    assert abs(x[x < 2].mean() - 0.5) < 0.01


def test_compute_sqrt_inputs_nonzero():
    x = get_task("compute_sqrt").sample(2000, 3, np.random.default_rng(7)).inputs.numpy()
    assert np.all(x.any(axis=1))
    x = get_task("compute_sqrt").sample(50, 1, np.random.default_rng(7)).inputs.numpy()
    assert np.all(x == 1)


# ---------------------------------------------------------------------------------------------
# The expression helpers at depths beyond Python's recursion limit.

def test_expression_evaluator_is_iterative_and_correct_when_deep():
    ids = ExprIds(plus=5, minus=6, times=7, lparen=8, rparen=9)
    depth = 5000
    tokens = [8] * depth + [3] + [5, 1, 9] * depth  # ((((3+1)+1)+1)...) = 3 + depth
    assert evaluate(tokens, ids) == (3 + depth) % 5
    tokens = [6, 8] * depth + [2] + [9] * depth  # -(-(-(...2)))
    assert evaluate(tokens, ids) == (2 * (-1) ** depth) % 5


@pytest.mark.parametrize("tokens", [[8, 1, 5, 2], [1, 5], [5, 1], [1, 9], [8, 9], [1, 2], [10]])
def test_expression_evaluator_rejects_malformed(tokens):
    with pytest.raises(ValueError):
        evaluate(tokens, ExprIds(plus=5, minus=6, times=7, lparen=8, rparen=9))


def test_expression_precedence_and_unary_minus():
    ids = ExprIds(plus=5, minus=6, times=7, lparen=8, rparen=9)
    sym = {s: i for i, s in enumerate("01234+-*()")}
    for text in ["2+3*4", "2*3+4", "4-2*3-1", "-(1-2)*(4-3*(-2))", "3--3", "2*-3", "-4*2*3+1", "(1)"]:
        assert evaluate([sym[c] for c in text], ids) == eval(text) % 5, text
