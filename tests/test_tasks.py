"""The 15 CHE tasks: the registry, every example of che_tasks.md, and agreement with an independent
plain-Python solver written from the spec on random samples at many lengths."""

import math

import numpy as np
import pytest
import torch

from lengen.errors import LengenError
from lengen.tasks import TASK_NAMES, TASKS, Batch, Task, get_task

# The table of che_tasks.md: name -> (level, input vocab, output vocab, output length of L).
TABLE = {
    "even_pairs": ("R", 2, 2, lambda L: 1),
    "modular_arithmetic": ("R", 9, 5, lambda L: 1),
    "parity_check": ("R", 2, 2, lambda L: 1),
    "cycle_navigation": ("R", 3, 5, lambda L: 1),
    "stack_manipulation": ("DCF", 5, 3, lambda L: L + 1),
    "reverse_string": ("DCF", 2, 2, lambda L: L),
    "modular_arithmetic_brackets": ("DCF", 11, 5, lambda L: 1),
    "solve_equation": ("DCF", 11, 5, lambda L: 1),
    "duplicate_string": ("CS", 2, 2, lambda L: 2 * L),
    "missing_duplicate_string": ("CS", 4, 2, lambda L: 1),
    "odds_first": ("CS", 2, 2, lambda L: L),
    "binary_addition": ("CS", 3, 3, lambda L: L + 1),
    "binary_multiplication": ("CS", 3, 3, lambda L: L),
    "compute_sqrt": ("CS", 2, 2, lambda L: math.ceil(L / 2)),
    "bucket_sort": ("CS", 5, 5, lambda L: L),
}
TERMINATED = {"stack_manipulation", "binary_addition", "binary_multiplication"}


def bits(s):
    return [int(c) for c in s]


# Every example of che_tasks.md: (task, input, expected target).
EXAMPLES = [
    ("even_pairs", bits("01001"), [1]),
    ("even_pairs", bits("01100"), [0]),
    ("even_pairs", bits("0"), [0]),
    ("modular_arithmetic", [4, 5, 0, 7, 0], [4]),
    ("modular_arithmetic", [2, 6, 0, 6, 3, 7, 3], [3]),
    ("parity_check", bits("10011"), [1]),
    ("cycle_navigation", bits("010211"), [2]),
    ("cycle_navigation", [2, 2, 2], [2]),
    ("cycle_navigation", [1, 1, 1, 1, 1, 1], [1]),
    ("stack_manipulation", [1, 1, 3, 2, 3], [0, 1, 1, 2, 0, 0]),
    ("stack_manipulation", [0, 2], [2, 0, 0]),
    ("stack_manipulation", [1, 2, 3, 4, 2], [0, 2, 0, 0, 0, 0]),
    ("stack_manipulation", [1], [1, 2]),  # L = 1: one bit b -> [b, 2]
    ("stack_manipulation", [0], [0, 2]),
    ("reverse_string", bits("00011"), bits("11000")),
    ("modular_arithmetic_brackets", [8, 4, 7, 1, 9], [4]),
    ("modular_arithmetic_brackets", [8, 4, 7, 8, 6, 0, 9, 9], [0]),
    ("modular_arithmetic_brackets", [6, 3], [2]),
    ("solve_equation", [7, 6, 9, 5, 2, 8, 10, 4], [3]),
    ("solve_equation", [9, 10, 1], [1]),
    ("solve_equation", [0, 0], [0]),  # L < 3: all-zero input, y = 0
    ("solve_equation", [0], [0]),
    ("duplicate_string", bits("101"), bits("101101")),
    ("missing_duplicate_string", [1, 2, 1, 1, 3], [1]),
    ("missing_duplicate_string", [2, 1, 0, 1, 3], [0]),
    ("missing_duplicate_string", [0, 2], [0]),
    ("missing_duplicate_string", [1], [1]),  # L = 1: x = [1], y = 1
    ("odds_first", bits("000100"), bits("000010")),
    ("binary_addition", [1, 0, 2, 0, 1, 0, 1, 0], [1, 1, 0, 1, 2, 0, 0, 0, 0]),
    ("binary_addition", [1, 2, 1, 0, 1], [0, 1, 1, 2, 0, 0]),
    ("binary_addition", [0], [0, 2]),
    ("binary_multiplication", [1, 1, 1, 0, 2, 0, 1, 1], [0, 1, 0, 1, 0, 1, 2, 0]),
    ("binary_multiplication", [1, 1, 2, 1, 1], [1, 0, 0, 1, 2]),
    ("binary_multiplication", [0], [2]),
    ("binary_multiplication", [1, 0], [0, 2]),
    ("compute_sqrt", bits("11001001"), bits("1110")),
    ("compute_sqrt", bits("01101"), bits("011")),
    ("compute_sqrt", bits("1"), bits("1")),
    ("bucket_sort", bits("24141"), bits("11244")),
]


# ---------------------------------------------------------------------------------------------
# Independent reference: one plain-Python function per task, from che_tasks.md, one input at a
# time. Each returns (target, mask) as lists.

def _with_terminator(body, width):
    target = body + [2] + [0] * (width - len(body) - 1)
    mask = [True] * (len(body) + 1) + [False] * (width - len(body) - 1)
    return target, mask


def _le_bits_to_int(b):
    value = 0
    for i, bit in enumerate(b):
        value += bit << i
    return value


def _int_to_le_bits(value):
    out = [value & 1]
    value >>= 1
    while value:
        out.append(value & 1)
        value >>= 1
    return out


def _isqrt(n):
    lo, hi = 0, 1 << (n.bit_length() // 2 + 1)
    while lo < hi:  # largest r with r*r <= n
        mid = (lo + hi + 1) // 2
        if mid * mid <= n:
            lo = mid
        else:
            hi = mid - 1
    return lo


ARITH = "01234+-*"
BRACKETS = "01234+-*()"
EQUATION = "01234+-()x="


def ref(name, x):
    L = len(x)
    if name == "even_pairs":
        return [sum(1 for i in range(L - 1) if x[i] != x[i + 1]) % 2], [True]
    if name == "modular_arithmetic":
        return [eval("".join(ARITH[t] for t in x)) % 5], [True]
    if name == "parity_check":
        return [sum(x) % 2], [True]
    if name == "cycle_navigation":
        position = 0
        for t in x:
            position = (position + {0: 0, 1: 1, 2: -1}[t]) % 5
        return [position], [True]
    if name == "stack_manipulation":
        stack = []
        for t in x:
            if t in (0, 1):
                stack.append(t)
            elif t == 2:
                if stack:
                    stack.pop()
            else:
                stack.append(t - 3)
        return _with_terminator(stack[::-1], L + 1)
    if name == "reverse_string":
        return [x[L - 1 - i] for i in range(L)], [True] * L
    if name == "modular_arithmetic_brackets":
        return [eval("".join(BRACKETS[t] for t in x)) % 5], [True]
    if name == "solve_equation":
        if L < 3:
            return [0], [True]
        text = "".join(EQUATION[t] for t in x[:-2])
        solutions = [c for c in range(5) if eval(text.replace("x", str(c))) % 5 == x[-1]]
        assert len(solutions) == 1, (x, solutions)
        return solutions, [True]
    if name == "duplicate_string":
        return x + x, [True] * (2 * L)
    if name == "missing_duplicate_string":
        if L == 1:
            return [1], [True]
        half = L // 2
        j = x.index(2)
        return [x[j + half] if j < half else x[j - half]], [True]
    if name == "odds_first":
        out = [x[i] for i in range(0, L, 2)] + [x[i] for i in range(1, L, 2)]
        return out, [True] * L
    if name in ("binary_addition", "binary_multiplication"):
        if 2 in x:
            s = x.index(2)
            n, m = _le_bits_to_int(x[:s]), _le_bits_to_int(x[s + 1:])
        else:
            n, m = _le_bits_to_int(x), None
        if name == "binary_addition":
            return _with_terminator(_int_to_le_bits(n + (m or 0)), L + 1)
        if m is None:
            return _with_terminator([0] * (L - 1), L)
        return _with_terminator(_int_to_le_bits(n * m), L)
    if name == "compute_sqrt":
        root = _isqrt(int("".join(map(str, x)), 2))
        width = (L + 1) // 2
        return [int(c) for c in format(root, f"0{width}b")], [True] * width
    if name == "bucket_sort":
        out = []
        for v in range(5):
            out += [v] * x.count(v)
        return out, [True] * L
    raise KeyError(name)


# ---------------------------------------------------------------------------------------------

def test_task_names_are_the_table_in_order():
    assert TASK_NAMES == list(TABLE)
    assert TASKS.names() == list(TABLE)
    assert len(set(TASK_NAMES)) == 15


@pytest.mark.parametrize("name", list(TABLE))
def test_level_vocab_and_output_length_per_table(name):
    task = get_task(name)
    level, vin, vout, out_len = TABLE[name]
    assert isinstance(task, Task) and task.name == name
    assert (task.level, task.input_vocab_size, task.output_vocab_size) == (level, vin, vout)
    for L in range(1, 60):
        assert task.output_length(L) == out_len(L)
        expected_in = L - 1 if name == "modular_arithmetic" and L % 2 == 0 else L
        assert task.input_length(L) == expected_in


def test_get_task_unknown_name_lists_valid_tasks():
    with pytest.raises(ValueError) as info:
        get_task("reverse_strings")
    assert isinstance(info.value, LengenError)
    message = str(info.value)
    assert "reverse_strings" in message
    assert all(name in message for name in TASK_NAMES)


def test_get_task_returns_fresh_instances():
    assert get_task("parity_check") is not get_task("parity_check")


@pytest.mark.parametrize("name,x,expected", EXAMPLES,
                         ids=[f"{e[0]}-{i}" for i, e in enumerate(EXAMPLES)])
def test_spec_examples(name, x, expected):
    task = get_task(name)
    targets, mask = task.solve(np.array([x], dtype=np.int64))
    assert np.asarray(targets).tolist() == [expected]
    assert len(expected) == task.output_length(len(x))
    end = expected.index(2) if name in TERMINATED else len(expected) - 1
    assert np.asarray(mask).tolist() == [[i <= end for i in range(len(expected))]]
    # The reference of this file reproduces the examples too (it is the oracle below).
    assert ref(name, x) == (expected, [i <= end for i in range(len(expected))])


LENGTHS = [1, 2, 3, 4, 5, 8, 17, 40, 120]


@pytest.mark.parametrize("name", list(TABLE))
def test_sampled_targets_match_independent_solver(name):
    task = get_task(name)
    rng = np.random.default_rng(1234)
    for L in LENGTHS:
        batch = task.sample(200 if L < 100 else 60, L, rng)
        assert isinstance(batch, Batch)
        assert batch.inputs.dtype == torch.int64 and batch.targets.dtype == torch.int64
        assert batch.mask.dtype == torch.bool
        for x, y, m in zip(batch.inputs.tolist(), batch.targets.tolist(), batch.mask.tolist()):
            assert (y, m) == ref(name, x), (name, L, x)


@pytest.mark.parametrize("name", list(TABLE))
def test_shapes_and_token_ranges(name):
    task = get_task(name)
    rng = np.random.default_rng(7)
    for L in [1, 2, 3, 6, 7, 33, 500]:
        batch = task.sample(16, L, rng)
        assert tuple(batch.inputs.shape) == (16, task.input_length(L))
        assert tuple(batch.targets.shape) == (16, task.output_length(L))
        assert batch.mask.shape == batch.targets.shape
        assert 0 <= batch.inputs.min() and batch.inputs.max() < task.input_vocab_size
        assert 0 <= batch.targets.min() and batch.targets.max() < task.output_vocab_size
        if name not in TERMINATED:
            assert batch.mask.all()


@pytest.mark.parametrize("name", sorted(TERMINATED))
def test_terminator_mask_covers_answer_and_terminator(name):
    task = get_task(name)
    rng = np.random.default_rng(3)
    for L in [1, 2, 3, 9, 64]:
        batch = task.sample(100, L, rng)
        targets, mask = batch.targets.numpy(), batch.mask.numpy()
        assert np.all((targets == 2).sum(axis=1) == 1)  # exactly one terminator
        end = np.argmax(targets == 2, axis=1)[:, None]
        pos = np.arange(targets.shape[1])
        assert np.array_equal(mask, pos <= end)
        assert np.all(targets[pos > end] == 0)  # padding is 0
        if name != "stack_manipulation":  # binary answers are minimal: no trailing zero bit
            has_body = end[:, 0] > 1
            assert np.all(targets[has_body, end[has_body, 0] - 1] == 1)


@pytest.mark.parametrize("name", list(TABLE))
def test_sampling_is_deterministic_given_rng_state(name):
    task = get_task(name)
    a = task.sample(32, 20, np.random.default_rng(5))
    b = task.sample(32, 20, np.random.default_rng(5))
    c = task.sample(32, 20, np.random.default_rng(6))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert torch.equal(a.mask, b.mask)
    assert not torch.equal(a.inputs, c.inputs)


@pytest.mark.parametrize("name", list(TABLE))
def test_sample_rejects_bad_arguments(name):
    task = get_task(name)
    with pytest.raises(ValueError):
        task.sample(4, 0, np.random.default_rng(0))
    with pytest.raises(ValueError):
        task.sample(0, 4, np.random.default_rng(0))


@pytest.mark.parametrize("name", list(TABLE))
def test_decoders_render_one_example(name):
    task = get_task(name)
    batch = task.sample(1, 8, np.random.default_rng(0))
    shown_in = task.decode_input(batch.inputs[0].tolist())
    shown_out = task.decode_output(batch.targets[0].tolist())
    assert isinstance(shown_in, str) and shown_in and isinstance(shown_out, str) and shown_out
    assert "<" not in shown_in + shown_out  # every sampled id has a symbol


@pytest.mark.parametrize("name,x,shown", [
    ("modular_arithmetic_brackets", [8, 4, 7, 8, 6, 0, 9, 9], "(4*(-0))"),
    ("solve_equation", [7, 6, 9, 5, 2, 8, 10, 4], "(-x+2)=4"),
    ("stack_manipulation", [1, 1, 3, 2, 3], "1 1 PUSH0 POP PUSH0"),
    ("missing_duplicate_string", [1, 2, 1, 1, 3], "1_11."),
    ("binary_addition", [1, 0, 2, 0, 1, 0, 1, 0], "10+01010"),
    ("binary_multiplication", [1, 1, 2, 1, 1], "11*11"),
    ("modular_arithmetic", [4, 5, 0, 7, 0], "4+0*0"),
])
def test_decode_input_symbols(name, x, shown):
    assert get_task(name).decode_input(x) == shown


def test_decode_output_marks_terminator_and_padding():
    assert get_task("binary_addition").decode_output([1, 1, 0, 1, 2, 0, 0, 0, 0]) == "1101|...."
    assert get_task("stack_manipulation").decode_output([2, 0, 0]) == "|.."
    # A model's wrong prediction after the terminator stays visible.
    assert get_task("binary_addition").decode_output([1, 2, 1]) == "1|1"
