"""The evaluation protocols against hand-computed examples, through fake logits functions."""

import math
import re

import numpy as np
import pytest
import torch

from lengen.errors import LengenError
from lengen.data.tokenizer import ByteTokenizer
from lengen.protocols import (greedy_generate_fn, last_segment_perplexity, make_trials, nll_from_logits,
                              parse_answer, passkey_accuracy, passkey_prompt, perplexity_vs_length,
                              token_counts, unigram_nll_fn)
from lengen.protocols.passkey import GARBAGE, INTRO, QUESTION, needle

V = 257


def uniform_logits(ids):
    return torch.zeros(ids.shape[0], ids.shape[1], V)


uniform_fn = nll_from_logits(uniform_logits)


def successor_logits(ids):
    """Knows the data: the next token is always (current + 1) mod 256."""
    out = torch.full((ids.shape[0], ids.shape[1], V), -1e4)
    out.scatter_(-1, ((ids + 1) % 256)[..., None], 0.0)
    return out


successor_fn = nll_from_logits(successor_logits)


def counting_seqs(n, length, start=0):
    return [[(start + 7 * i + t) % 256 for t in range(length)] for i in range(n)]


def test_uniform_model_has_vocab_size_perplexity():
    seqs = counting_seqs(3, 65)
    for p in perplexity_vs_length(uniform_fn, seqs, [8, 64]) + last_segment_perplexity(uniform_fn, seqs, [16, 64], 8):
        assert p.ppl == pytest.approx(V, rel=1e-6)


def test_model_that_knows_the_next_token_has_perplexity_one():
    seqs = counting_seqs(2, 40)
    pts = perplexity_vs_length(successor_fn, seqs, [4, 39], batch_size=2)
    assert [p.ppl for p in pts] == [1.0, 1.0]
    assert [p.tokens for p in pts] == [2 * 4, 2 * 39]  # every target of every window scored


def test_hand_computed_two_token_model():
    # p(1) = 3/4, p(0) = 1/4 at every position
    fn = nll_from_logits(lambda ids: torch.tensor([0.0, math.log(3.0)]).expand(ids.shape[0], ids.shape[1], 2))
    seq = [1, 0, 1, 1, 1, 0]
    # L = 4: inputs seq[:4], targets seq[1:5] = 0, 1, 1, 1
    want = -(math.log(0.25) + 3 * math.log(0.75)) / 4
    (p,) = perplexity_vs_length(fn, [seq], [4])
    assert p.nll == pytest.approx(want) and p.ppl == pytest.approx(math.exp(want))
    # last segment, L = 4, K = 2: window seq[1:6], scored targets seq[4:6] = 1, 0
    (q,) = last_segment_perplexity(fn, [seq], [4], segment=2)
    assert q.nll == pytest.approx(-(math.log(0.75) + math.log(0.25)) / 2) and q.tokens == 2


def test_last_segment_scores_the_same_tokens_at_every_length():
    rng = np.random.default_rng(0)
    logp = np.log(rng.dirichlet(np.ones(V)))
    seqs = [rng.integers(0, 256, size=n).tolist() for n in (300, 257, 400)]  # different lengths
    seen = []

    @nll_from_logits
    def fn(ids):  # log p depends on the target id only, so the NLL identifies the scored tokens
        seen.append(ids.shape[1])
        return torch.from_numpy(logp).float().expand(ids.shape[0], ids.shape[1], V)

    K, lengths = 16, [16, 64, 256]
    pts = last_segment_perplexity(fn, seqs, lengths, K)
    want = -np.mean([logp[t] for s in seqs for t in s[-K:]])
    for p in pts:
        assert p.nll == pytest.approx(want, rel=1e-6) and p.tokens == K * len(seqs)
    assert sorted(set(seen)) == lengths  # each context length really was one forward pass of L tokens
    # the plain protocol scores different tokens at different lengths (the check above can fail)
    plain = perplexity_vs_length(fn, seqs, lengths)
    assert len({round(p.nll, 6) for p in plain}) == 3


def test_last_segment_windows_keep_the_prefix_at_every_length():
    """A sequence that begins with BOS (hf eval's, where the tokenizer adds one): every window,
    not only the longest, is BOS then the final L tokens before the last target, L + 1 in all."""
    BOS = 256
    text = list(range(100))
    seen = []

    def nll(ids, last):
        seen.append(ids[0].tolist())
        return torch.zeros(ids.shape[0], last)

    last_segment_perplexity(nll, [[BOS] + text], [8, 32, 100], segment=4, prefix=[BOS])
    assert seen == [[BOS] + text[100 - 8:], [BOS] + text[100 - 32:], [BOS] + text]
    seen.clear()
    last_segment_perplexity(nll, [[BOS] + text], [8], segment=4)   # no prefix: the plain window
    assert seen == [text[100 - 9:]]
    with pytest.raises(ValueError, match="begin with the prefix"):
        last_segment_perplexity(nll, [text], [8], segment=4, prefix=[BOS])


def test_protocol_input_errors():
    with pytest.raises(LengenError, match="needs 65"):
        perplexity_vs_length(uniform_fn, counting_seqs(1, 64), [64])
    with pytest.raises(LengenError, match="segment"):
        last_segment_perplexity(uniform_fn, counting_seqs(1, 100), [16, 32], segment=17)
    with pytest.raises(LengenError):
        perplexity_vs_length(uniform_fn, [], [4])


def test_unigram_baseline_matches_hand_computation():
    counts = token_counts(np.array([0, 0, 0, 1]), 2)  # add-one: p(0) = 4/6, p(1) = 2/6
    (p,) = perplexity_vs_length(unigram_nll_fn(counts), [[0, 1, 0]], [2])
    assert p.nll == pytest.approx(-(math.log(2 / 6) + math.log(4 / 6)) / 2)


# -- passkey --------------------------------------------------------------------------------------

tok = ByteTokenizer()


def test_passkey_prompt_format():
    p = passkey_prompt(200, 4242, 50)
    lines = p.split("\n")
    assert lines[0] == INTRO and lines[-1] == QUESTION and lines[2] == needle(4242)
    assert len(lines[1]) == 50 and len(lines[3]) == 150 and lines[1] == lines[3][:50]
    assert (GARBAGE + " " + GARBAGE).startswith(lines[3])
    assert p.count(needle(4242)) == 1 and p.count("4242") == 2  # one needle, the key only inside it


def test_passkey_trials_fit_the_length_and_are_seeded():
    for L in (300, 1000):
        trials = make_trials(tok.encode, L, 5, seed=3)
        for t in trials:
            assert L - 30 < len(t.prompt_ids) <= L
            assert t.prompt.count(needle(t.key)) == 1 and 1 <= t.key <= 50000
            assert re.findall(r"\d+", t.prompt) == [str(t.key)] * 2
        assert [t.prompt for t in make_trials(tok.encode, L, 5, seed=3)] == [t.prompt for t in trials]
    assert make_trials(tok.encode, 300, 5, seed=4)[0].prompt != make_trials(tok.encode, 300, 5, seed=3)[0].prompt
    with pytest.raises(LengenError, match="even without filler"):
        make_trials(tok.encode, 100, 1)


def test_parse_answer():
    assert parse_answer(" 12345. The grass") == 12345
    assert parse_answer(" is 007") == 7
    assert parse_answer(" the grass is green") is None


def test_passkey_accuracy_of_a_copying_model_is_one_and_of_a_guesser_zero():
    def copier(ids, n):
        key = re.search(r"The pass key is (\d+)\. Remember", tok.decode(ids)).group(1)
        return tok.encode(f" {key}. The grass")[:n]

    records = []
    pts = passkey_accuracy(copier, tok.encode, tok.decode, [300, 600], trials=4, seed=0, records=records)
    assert [p.accuracy for p in pts] == [1.0, 1.0] and len(records) == 8
    assert all(r["answer"] == r["key"] for r in records)
    wrong = passkey_accuracy(lambda ids, n: tok.encode(" 0."), tok.encode, tok.decode, [300], trials=4)
    assert wrong[0].accuracy == 0.0 and wrong[0].correct == 0


# the needle, read with a pattern of its own: the key twice, as the prompt format says
NEEDLE = re.compile(r"The pass key is (\d+)\. Remember it\. \1 is the pass key\.")


def test_passkey_accuracy_is_the_share_of_exactly_right_keys():
    """Oracles that read the key out of the decoded prompt: right every time (1.0), off by one
    (0.0: a number is not enough, it must be the key), right on every other prompt (0.5); and a
    constant answer (0.0). Keys are 1..50000, so the constant 0 is never right by luck."""
    seen = []

    def key_in(ids):
        keys = NEEDLE.findall(bytes(ids).decode())   # raw bytes, not the protocol's tokenizer
        assert len(keys) == 1
        seen.append(int(keys[0]))
        return int(keys[0])

    def oracle(right):
        """The key when right(i) for the i-th prompt, else the key + 1."""
        calls = []

        def generate(ids, n):
            calls.append(1)
            key = key_in(ids) + (0 if right(len(calls) - 1) else 1)
            return list(f" {key}. The grass".encode())[:n]
        return generate

    lengths = [300, 450, 900]
    always = passkey_accuracy(oracle(lambda i: True), tok.encode, tok.decode, lengths, trials=6, seed=5)
    assert [(p.length, p.accuracy, p.correct, p.trials) for p in always] == [(L, 1.0, 6, 6) for L in lengths]
    assert len(set(seen)) > 10   # the keys really differ from prompt to prompt
    off = passkey_accuracy(oracle(lambda i: False), tok.encode, tok.decode, lengths, trials=6, seed=5)
    assert [p.accuracy for p in off] == [0.0, 0.0, 0.0]
    half = passkey_accuracy(oracle(lambda i: i % 2 == 0), tok.encode, tok.decode, [300], trials=6, seed=5)
    assert half[0].accuracy == 0.5 and half[0].correct == 3
    constant = passkey_accuracy(lambda ids, n: list(b" 0. The")[:n], tok.encode, tok.decode, lengths,
                                trials=6, seed=5)
    assert [p.accuracy for p in constant] == [0.0, 0.0, 0.0]


def test_greedy_generate_fn_feeds_back_its_own_tokens():
    gen = greedy_generate_fn(successor_logits)
    assert gen([10, 11], 4) == [12, 13, 14, 15]


def test_a_custom_nll_fn_sees_windows_of_length_plus_one():
    calls = []

    def nll_fn(ids, last):  # the Hugging Face convention: one sequence, returns [last]
        calls.append((ids.shape[1], last))
        return torch.ones(last)

    seqs = counting_seqs(2, 50)
    (p,) = perplexity_vs_length(nll_fn, seqs, [16])
    (q,) = last_segment_perplexity(nll_fn, seqs, [32], segment=4)
    assert p.ppl == pytest.approx(math.e) and q.ppl == pytest.approx(math.e)
    assert calls == [(17, 16), (17, 16), (33, 4), (33, 4)]


def test_plot_adds_a_linear_zoom_panel_only_when_a_method_collapses(tmp_path):
    import matplotlib.image

    from lengen.protocols import plot_metric

    held = [{"method": m, "length": n, "ppl": v} for m, vals in
            {"yarn": [4.4, 4.0, 3.9], "rerope": [4.0, 3.6, 3.5]}.items() for n, v in zip((4, 8, 16), vals)]
    collapsed = held + [{"method": "rope", "length": n, "ppl": v} for n, v in zip((4, 8, 16), (4.0, 3.7, 400.0))]
    widths = {}
    for name, rows in (("held", held), ("collapsed", collapsed)):
        plot_metric(rows, "ppl", 8, tmp_path / f"{name}.png", name)
        widths[name] = matplotlib.image.imread(tmp_path / f"{name}.png").shape[1]
    assert widths["collapsed"] > 1.4 * widths["held"]   # two panels (11 in) against one (7 in)
