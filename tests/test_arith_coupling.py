"""Abacus ids and coupled ids against the papers' worked examples (the reference note's sections
7 and 8), written out by hand, and the training offsets' ranges."""

import numpy as np
import torch

from lengen.arith import get_arith_task
from lengen.arith.abacus import AbacusEmbedding, abacus_ids, draw_offset
from lengen.arith.formats import answer_significance, encode
from lengen.arith.coupling import ARITH_POSITIONS
from lengen.arith.problem import Problem
from lengen.arith.vocab import BOS, EOS, EQUALS, PLUS, TIMES


def tokens(text: str) -> torch.Tensor:
    table = {"+": PLUS, "*": TIMES, "=": EQUALS, "B": BOS, "E": EOS}
    return torch.tensor([[table[ch] if ch in table else int(ch) for ch in text]])


def test_abacus_ids_of_the_papers_example():
    # McLeish et al.: 98+45=143 written reversed "89+54=341"
    assert abacus_ids(tokens("89+54=341")).tolist() == [[1, 2, 0, 1, 2, 0, 1, 2, 3]]
    assert abacus_ids(tokens("89+54=341"), offset=5).tolist() == [[6, 7, 0, 6, 7, 0, 6, 7, 8]]
    # BOS and EOS are not digits: 0, and they reset nothing that was not reset already
    assert abacus_ids(tokens("B89+54=341E")).tolist() == [[0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 0]]
    # multiplication and several operands: each number counts from 1 again
    assert abacus_ids(tokens("B123*4=294E")).tolist() == [[0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 0]]
    assert abacus_ids(tokens("1+22+333=656")).tolist() == [[1, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3]]


def test_abacus_ids_row_by_row():
    batch = torch.cat([tokens("B9+1=01E"), tokens("B12+3=51E")[:, :8]])
    assert abacus_ids(batch).tolist() == [[0, 1, 0, 1, 0, 1, 2, 0], [0, 1, 2, 0, 1, 0, 1, 2]]


def test_abacus_offset_is_uniform_on_0_to_k():
    g = torch.Generator().manual_seed(0)
    draws = [draw_offset(3, g) for _ in range(4000)]
    assert set(draws) == {0, 1, 2, 3}
    assert all(abs(draws.count(k) / 4000 - 0.25) < 0.03 for k in range(4))


def test_abacus_table_refuses_an_id_past_its_rows():
    emb = AbacusEmbedding(8, rows=10)
    assert emb(torch.tensor([[0, 9]])).shape == (1, 2, 8)
    try:
        emb(torch.tensor([[10]]))
    except Exception as e:
        assert "abacus id 10" in str(e)
    else:
        raise AssertionError("no error")


def significance(problem, fmt):
    return torch.tensor([encode(problem, fmt).significance])


def test_coupled_ids_of_the_papers_example():
    # Cho et al.'s code (AdditionDatasetWithCoupledPositions, s = start = 1): 57+68 -> [BOS] 5 7 + 6 8 = 5 2 1
    # [EOS]; end = s + max_len + 1 = 4; a's digits and '+' get range(end - 2, end + 1) = 2, 3, 4, b's and
    # '=' the same; the answer "125" gets range(end - 3, end) = 1, 2, 3, reversed with it to 3, 2, 1
    sig = significance(Problem((57, 68), "+", 125, (2, 2), 3), "padded")
    coupled = ARITH_POSITIONS.get("coupled")(max_position=20)
    assert coupled(sig).tolist() == [[0, 2, 3, 4, 2, 3, 4, 3, 2, 1, 0]]
    # a shorter operand is zero-padded and coupled by significance: 9+123=132 -> 009+123=2310, end = 5
    sig = significance(Problem((9, 123), "+", 132, (1, 3), 4), "padded")
    assert coupled(sig).tolist() == [[0, 2, 3, 4, 5, 2, 3, 4, 5, 4, 3, 2, 1, 0]]
    # reversed operands couple the same way: 89+54=341, the digit worth 10^t gets 1 + 2 - t
    sig = significance(Problem((98, 45), "+", 143, (2, 2), 3), "reversed")
    assert coupled(sig).tolist() == [[0, 3, 2, 4, 3, 2, 4, 3, 2, 1, 0]]
    # the given answer width counts, not the digits written: 12+34=46 reversed "21+43=64", width 3
    sig = significance(Problem((12, 34), "+", 46, (2, 2), 3), "reversed")
    assert coupled(sig, answer_width=torch.tensor([[3]])).tolist() == [[0, 3, 2, 4, 3, 2, 4, 3, 2, 0]]


def test_coupled_ids_while_decoding_are_those_of_the_whole_sequence():
    # greedy decoding sees the prompt and the answer so far, each answer token's significance known in
    # advance (formats.answer_significance); its ids must be the training sequence's, prefix by prefix
    coupled = ARITH_POSITIONS.get("coupled")(max_position=30)
    for fmt in ("padded", "reversed"):
        for problem in (Problem((57, 68), "+", 125, (2, 2), 3), Problem((12, 34), "+", 46, (2, 2), 3),
                        Problem((9, 12345), "+", 12354, (1, 5), 6)):
            e = encode(problem, fmt)
            width = torch.tensor([[e.answer_width]])
            whole = coupled(torch.tensor([e.significance]), answer_width=width)[0].tolist()
            for k in range(e.prompt_length, len(e.tokens)):
                prefix = e.significance[:e.prompt_length] + [answer_significance(fmt, slot)
                                                             for slot in range(k - e.prompt_length)]
                assert coupled(torch.tensor([prefix]), answer_width=width)[0].tolist() == whole[:k], (fmt, problem)


def test_coupled_training_offsets_shift_each_sequence_within_the_table():
    task = get_arith_task("addition")
    rng = np.random.default_rng(0)
    problems = task.sample(64, 5, rng)
    encoded = [encode(p, "padded") for p in problems]
    T = max(len(e.tokens) for e in encoded)
    sig = torch.tensor([e.significance + [-2] * (T - len(e.tokens)) for e in encoded])
    coupled = ARITH_POSITIONS.get("coupled")(max_position=12)
    base = coupled(sig)
    shifts = set()
    for seed in range(50):
        ids = coupled(sig, torch.Generator().manual_seed(seed), train=True)
        nonzero = sig != -2
        diff = (ids - base)[nonzero]
        for row in range(64):
            d = (ids - base)[row][nonzero[row]]
            assert (d == d[0]).all()                    # one s per sequence
            answer_digits = problems[row].answer_width
            assert 0 <= int(d[0]) <= 11 - answer_digits - 1   # s - 1 for s in 1..max_pos - len(c)
            shifts.add(int(d[0]))
        assert int(ids.max()) <= 11 and diff.numel()
    assert shifts == set(range(0, 11 - 2))              # the shortest answers (2 digits): s up to 9


def test_standard_ids_are_0_to_T():
    sig = torch.zeros(3, 7, dtype=torch.long)
    assert ARITH_POSITIONS.get("standard")(max_position=20)(sig).tolist() == [list(range(7))]
