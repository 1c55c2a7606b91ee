"""The arithmetic tasks against Python's integers: every sampled problem's tokens, read back as
text by an independent parser, hold a true equation, in every format; sampling is uniform over
digit counts and independent per operand; the per-cell exact match is counted by hand."""

import re
from collections import Counter

import numpy as np
import pytest

from lengen.arith import ARITH_TASKS, get_arith_task
from lengen.arith.formats import FORMATS, encode
from lengen.arith.metrics import accuracy_by_cell, accuracy_by_length, exact_match
from lengen.arith.problem import Problem
from lengen.arith.vocab import EOS, decode

TASKS = [("addition", {}), ("multi_addition", {"max_operands": 4}), ("multiplication", {}),
         ("multiplication", {"b_digits": 1})]


def read_back(text: str, fmt: str) -> tuple[list[str], str, str]:
    """'<s>89+54=341</s>' -> (['89', '54'], '+', '341') as written, checked for shape by regex."""
    m = re.fullmatch(r"<s>([0-9+*]+)=([0-9]+)</s>", text)
    assert m, text
    op = "*" if "*" in m.group(1) else "+"
    return m.group(1).split(op), op, m.group(2)


def value(digits: str, fmt: str, answer: bool) -> int:
    reversed_ = fmt == "reversed" or (fmt == "padded" and answer)
    return int(digits[::-1] if reversed_ else digits)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name,options", TASKS)
def test_every_sample_is_a_true_equation(name, options, fmt):
    task = get_arith_task(name, **options)
    rng = np.random.default_rng(1)
    for problem in task.sample(400, 7, rng):
        enc = encode(problem, fmt)
        operands, op, answer = read_back(decode(enc.tokens), fmt)
        a = [value(x, fmt, False) for x in operands]
        expected = sum(a) if op == "+" else a[0] * a[1]
        assert value(answer, fmt, True) == expected
        assert decode(enc.tokens[enc.prompt_length - 1:enc.prompt_length]) == "="
        assert enc.tokens[-1] == EOS
        true_digits = [len(str(x)) for x in a]
        assert all(1 <= d <= 7 for d in true_digits)
        if fmt == "padded":   # operands padded to the longest, the answer to the widest answer possible
            assert len({len(x) for x in operands}) == 1 and len(operands[0]) == max(true_digits)
            widest = sum(10 ** d - 1 for d in true_digits) if op == "+" else (10 ** true_digits[0] - 1) * (10 ** true_digits[1] - 1)
            assert len(answer) == len(str(widest))
        else:                 # no leading zeros: the written length is the digit count
            assert [len(x) for x in operands] == true_digits and answer == str(expected)[::-1 if fmt == "reversed" else 1]
        if name != "multi_addition":
            assert problem.cell == tuple(true_digits)
        else:
            assert problem.cell == (max(true_digits), len(true_digits))
        if options.get("b_digits") == 1:
            assert true_digits[1] == 1


def test_carries_by_hand():
    # 98+45=143 written as McLeish et al. write it, and as Cho et al. do (57+68=125 -> answer 521)
    assert decode(encode(Problem((98, 45), "+", 143, (2, 2), 3), "reversed").tokens) == "<s>89+54=341</s>"
    assert decode(encode(Problem((57, 68), "+", 125, (2, 2), 3), "padded").tokens) == "<s>57+68=521</s>"
    # a carry through every digit: 9999 + 1 = 10000
    p = get_arith_task("addition").make([4, 1], np.random.default_rng(0))
    p = Problem((9999, 1), "+", 10000, p.cell, p.answer_width)
    assert decode(encode(p, "reversed").tokens) == "<s>9999+1=00001</s>"
    assert decode(encode(p, "padded").tokens) == "<s>9999+0001=00001</s>"
    assert decode(encode(p, "plain").tokens) == "<s>9999+1=10000</s>"
    # padded answer width when no carry happens: 12 + 3 = 15 -> 3 digits, reversed '510'
    assert decode(encode(Problem((12, 3), "+", 15, (2, 1), 3), "padded").tokens) == "<s>12+03=510</s>"


def test_sampled_problems_have_carries():
    rng = np.random.default_rng(2)
    problems = get_arith_task("addition").sample(500, 6, rng)
    carries = sum(len(str(p.answer)) > max(len(str(x)) for x in p.operands) for p in problems)
    assert 50 < carries < 450


@pytest.mark.parametrize("name,options", TASKS)
def test_training_lengths_are_uniform_and_independent(name, options):
    task = get_arith_task(name, **options)
    rng = np.random.default_rng(3)
    n, N = 6000, 5
    digits = [[len(str(x)) for x in p.operands] for p in task.sample(n, N, rng)]
    a = Counter(d[0] for d in digits)
    assert set(a) == set(range(1, N + 1))
    assert all(abs(a[k] / n - 1 / N) < 0.025 for k in a)          # about 4 sigma
    if options.get("b_digits") == 1:
        assert {d[1] for d in digits} == {1}
        return
    same = sum(d[0] == d[1] for d in digits) / n                   # independent: P(a = b) = 1/N
    assert abs(same - 1 / N) < 0.025
    if name == "multi_addition":
        counts = Counter(len(d) for d in digits)
        assert set(counts) == {2, 3, 4} and all(abs(c / n - 1 / 3) < 0.03 for c in counts.values())


@pytest.mark.parametrize("name,options", TASKS)
def test_evaluation_problems_fall_in_their_cell(name, options):
    task = get_arith_task(name, **options)
    rng = np.random.default_rng(4)
    cells = task.cells(4)
    expected = {"addition": 16, "multi_addition": 12, "multiplication": 16 if not options else 4}[name]
    assert len(cells) == expected
    for cell in cells:
        for _ in range(20):
            p = task.problem(cell, rng)
            digits = [len(str(x)) for x in p.operands]
            assert p.cell == cell
            assert (max(digits), len(digits)) == cell if name == "multi_addition" else tuple(digits) == cell


def test_exact_match_per_cell_by_hand():
    target = [3, 4, 1, EOS]
    assert exact_match([3, 4, 1, EOS, 7, 7], target)
    assert not exact_match([3, 4, 1, 0], target)         # no EOS where it belongs
    assert not exact_match([3, 4], target)
    cells = [(1, 1), (1, 1), (2, 1), (2, 2), (2, 2), (2, 2)]
    correct = [True, False, True, True, True, False]
    by_cell = accuracy_by_cell(cells, correct)
    assert by_cell == {(1, 1): {"correct": 1, "total": 2, "accuracy": 0.5},
                       (2, 1): {"correct": 1, "total": 1, "accuracy": 1.0},
                       (2, 2): {"correct": 2, "total": 3, "accuracy": 2 / 3}}
    # against length: the diagonal for addition, every operand count for multi-operand addition
    assert accuracy_by_length(by_cell, get_arith_task("addition").length_of) == {1: 0.5, 2: 2 / 3}
    assert accuracy_by_length(by_cell, get_arith_task("multi_addition").length_of) == {1: 0.5, 2: 3 / 4}


def test_registry_lists_the_three_tasks():
    assert ARITH_TASKS.names() == ["addition", "multi_addition", "multiplication"]
