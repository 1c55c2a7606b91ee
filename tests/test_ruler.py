"""The RULER-style protocol: answers recoverable from the prompt text alone, an oracle scores 1 and a
constant 0 (directly and through `lengen lm eval` / `lengen hf eval`), seeded prompts that fit."""

import csv
import json
import re
from collections import Counter

import pytest
import yaml

from lengen.cli import main
from lengen.data.tokenizer import ByteTokenizer
from lengen.errors import LengenError
from lengen.protocols.ruler import TASKS, make_ruler_trials, ruler_accuracy, score
from guards import ModelLoaded, no_model
from tiny_lm import TINY

tok = ByteTokenizer()
LENGTHS = [800, 1500]   # bytes: every task fits 800 (the multi-needle ones need about 700)


# -- a solver of its own: reads the prompt text, knows nothing of the generator --------------------

NEEDLE = re.compile(r"One of the special magic (numbers|words|uuids) for ([a-z]+-[a-z]+) is: ([0-9a-z-]+)\.")
QUERY = re.compile(r"What are all the special magic \w+ for (.+?) mentioned in the provided text\?")
ASSIGN = re.compile(r"VAR ([A-Z]{5}) = ([A-Z]{5}|\d+)\.")


def solve(prompt: str) -> list[str]:
    if prompt.startswith("Below is a numbered list of words"):
        listed = prompt.split("\n")[1]
        counts = Counter(re.findall(r"\d+\. ([a-z]+)", listed)).most_common()
        n = int(re.search(r"What are the (\d+) most common words", prompt).group(1))
        assert counts[n - 1][1] > counts[n][1]   # the common words stand apart
        return [w for w, _ in counts[:n]]
    if prompt.startswith("Memorize and track"):
        value = re.search(r"assigned the value (\d+) in the text above", prompt).group(1)
        holding = {value}
        for name, source in ASSIGN.findall(prompt):   # the chain is written in order
            if source in holding:
                holding.add(name)
        return sorted(holding - {value})
    keys = re.split(r", and |, ", QUERY.search(prompt).group(1))
    return [v for _, k, v in NEEDLE.findall(prompt) if k in keys]


@pytest.mark.parametrize("task", TASKS)
def test_a_plain_solver_recovers_the_answers_from_the_prompt_text(task):
    sizes = {"niah_multivalue": 4, "niah_multiquery": 4, "vt": 5, "cwe": 10}   # answers expected
    for L in LENGTHS:
        for t in make_ruler_trials(task, tok.encode, L, 3, seed=1):
            text = bytes(t.prompt_ids).decode()   # raw bytes, not the protocol's tokenizer
            assert sorted(solve(text)) == sorted(t.answers)
            assert len(set(t.answers)) == sizes.get(task, 1)
            if task.startswith("niah"):   # every needle really is in the prompt, the distractors too
                assert len(NEEDLE.findall(text)) == (1 if task.startswith("niah_single") else 4)


@pytest.mark.parametrize("task", TASKS)
def test_prompts_fit_the_length_and_depend_on_the_seed_only(task):
    for L in LENGTHS:
        trials = make_ruler_trials(task, tok.encode, L, 3, seed=2)
        assert all(L - 60 < len(t.prompt_ids) <= L for t in trials)   # the largest filler that fits
        assert len({t.prompt for t in trials}) == 3
        again = make_ruler_trials(task, tok.encode, L, 3, seed=2)
        assert [t.prompt for t in again] == [t.prompt for t in trials]
        other = make_ruler_trials(task, tok.encode, L, 3, seed=3)
        assert all(a.prompt != b.prompt for a, b in zip(other, trials))
    with pytest.raises(LengenError, match="even without filler"):
        make_ruler_trials(task, tok.encode, 200, 1)


def oracle(ids, n):
    answer = list((" " + ", ".join(solve(bytes(ids).decode())) + ".").encode())
    assert len(answer) <= n + 1   # max_new_tokens leaves room for the answers
    return answer[:n]


def first_only(ids, n):
    return list((" " + solve(bytes(ids).decode())[0]).encode())[:n]


def constant(ids, n):
    return list(b" 0. The grass")[:n]


def test_an_oracle_scores_one_a_constant_zero_and_half_an_answer_half():
    records = []
    pts = ruler_accuracy(oracle, tok.encode, tok.decode, LENGTHS, trials=3, seed=0, records=records)
    assert [(p.task, p.length) for p in pts] == [(t, L) for t in TASKS for L in LENGTHS]
    assert all(p.accuracy == 1.0 and p.correct == 3 and p.trials == 3 for p in pts)
    assert len(records) == len(TASKS) * len(LENGTHS) * 3 and all(r["score"] == 1.0 for r in records)
    pts = ruler_accuracy(constant, tok.encode, tok.decode, [800], trials=3, seed=0)
    assert all(p.accuracy == 0.0 and p.correct == 0 for p in pts)
    # string-match-all: one of several answers scores its fraction, and no trial counts as correct
    expected = {"niah_multikey": 1, "niah_multivalue": 1 / 4, "niah_multiquery": 1 / 4, "vt": 1 / 5,
                "cwe": 1 / 10}
    for p in ruler_accuracy(first_only, tok.encode, tok.decode, [800], ["niah_single", *expected], 2):
        assert p.accuracy == pytest.approx(expected.get(p.task, 1.0))
        assert p.correct == (2 if p.task in ("niah_single", "niah_multikey") else 0)


def test_score_matches_whole_words_only():
    assert score(["1234567"], "The number is 1234567.") == 1.0
    assert score(["1234567"], "12345678") == 0.0 and score(["apple"], "misty-apple") == 0.0
    assert score(["ABCDE", "FGHIJ"], " abcde, KLMNO") == 0.5


# -- through `lengen lm eval` with a stand-in for the model's greedy decoder ------------------------

@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    with pytest.MonkeyPatch.context() as m:
        m.setenv("LENGEN_CACHE", str(root / "cache"))
        assert main(["lm", "train", *TINY, "--steps", "3", "--out", str(root / "run")]) == 0
    return root / "run"


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


COLUMNS = ["method", "task", "length", "accuracy", "correct", "trials", "mean_prompt_tokens", "note"]


@pytest.mark.parametrize("answer,accuracy", [(oracle, 1.0), (constant, 0.0)])
def test_lm_eval_ruler_scores_an_oracle_one_and_a_constant_zero(lm_run, tmp_path, monkeypatch, answer,
                                                               accuracy):
    from lengen.lm.model import DecoderLM

    prompts = {}

    def generate_fn(self, method=None):   # what lm eval asks the model for, once per method
        calls = prompts.setdefault(len(prompts), [])

        def generate(ids, n):
            calls.append(list(ids))
            return answer(ids, n)
        return generate

    monkeypatch.setattr(DecoderLM, "generate_fn", generate_fn)
    out = tmp_path / "ruler"
    assert main(["lm", "eval", str(lm_run), "--protocol", "ruler", "--lengths", "800,1000", "--trials", "2",
                 "--methods", "rope,yarn:factor=2", "--out", str(out), "--no-progress"]) == 0
    rows = read_csv(out / "results.csv")
    assert list(rows[0]) == COLUMNS
    assert [(r["method"], r["task"], int(r["length"])) for r in rows] == [
        (m, t, L) for m in ("rope", "yarn:factor=2") for t in TASKS for L in (800, 1000)]
    assert all(float(r["accuracy"]) == accuracy and r["trials"] == "2" for r in rows)
    assert all(int(r["correct"]) == (2 if accuracy else 0) and float(r["mean_prompt_tokens"]) <= int(r["length"])
               for r in rows)
    assert len(prompts[0]) == len(TASKS) * 2 * 2 and prompts[0] == prompts[1]   # the same prompts per method
    result = json.loads((out / "results.json").read_text())
    assert {m["accuracy"] for m in result["means"]} == {accuracy} and result["tasks"] == list(TASKS)
    assert (out / "ruler_vs_length.png").stat().st_size > 1000
    # --tasks picks some, in the order given
    assert main(["lm", "eval", str(lm_run), "--protocol", "ruler", "--tasks", "vt,niah_single", "--lengths",
                 "800", "--trials", "1", "--methods", "rope", "--out", str(tmp_path / "some"), "--no-progress"]) == 0
    assert [r["task"] for r in read_csv(tmp_path / "some" / "results.csv")] == ["vt", "niah_single"]


def test_lm_eval_ruler_notes_a_length_too_short_for_a_task(lm_run, tmp_path):
    out = tmp_path / "short"
    assert main(["lm", "eval", str(lm_run), "--protocol", "ruler", "--tasks", "niah_single,niah_multikey",
                 "--lengths", "500", "--trials", "1", "--methods", "rope", "--out", str(out), "--no-progress"]) == 0
    single, multi = read_csv(out / "results.csv")
    assert single["note"] == "" and multi["accuracy"] == "nan" and "even without filler" in multi["note"]


# -- through `lengen hf eval` --------------------------------------------------------------------------

CHARS = [chr(i) for i in range(32, 127)] + ["\n"]   # the tiny model's ids: 2 + index here


def text_of(ids):
    return "".join(CHARS[i - 2] for i in ids if i >= 2)


def ids_of(text):
    return [CHARS.index(c) + 2 for c in text]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    from tiny_llama import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("hf"))


@pytest.mark.parametrize("right", [True, False])
def test_hf_eval_ruler_scores_an_oracle_one_and_a_constant_zero(model_dir, tmp_path, monkeypatch, right):
    import lengen.hf.evaluate as evaluate_mod

    prompts = []

    def greedy_fn(model, pad_token_id):
        def generate(ids, n):
            prompts.append(list(ids))
            text = " " + ", ".join(solve(text_of(ids))) if right else " 0. The grass"
            return ids_of(text)[:n]
        return generate

    monkeypatch.setattr(evaluate_mod, "greedy_fn", greedy_fn)
    out = tmp_path / "ruler"
    assert main(["hf", "eval", str(model_dir / "model"), "--protocol", "ruler", "--trials", "2",
                 "--tasks", "niah_single_uuid,vt", "cwe", "--methods", "rope", "yarn:factor=2",
                 "--lengths", "800", "--out", str(out), "--no-progress"]) == 0
    rows = read_csv(out / "results.csv")
    assert list(rows[0]) == COLUMNS
    assert [(r["method"], r["task"], float(r["accuracy"])) for r in rows] == [
        (m, t, 1.0 if right else 0.0) for m in ("rope", "yarn:factor=2") for t in ("niah_single_uuid", "vt", "cwe")]
    assert prompts[:6] == prompts[6:] and all(len(p) <= 800 for p in prompts)
    result = json.loads((out / "results.json").read_text())
    assert all(len(r["answers"]) == 2 for r in result["rows"]) and result["meta"]["tasks"] == [
        "niah_single_uuid", "vt", "cwe"]
    assert (out / "plot.png").stat().st_size > 1000


# -- options ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--protocol", "ruler", "--tasks", "vt,nope"], "--tasks: unknown task 'nope'; valid: " + ", ".join(TASKS)),
    (["--protocol", "ppl", "--tasks", "vt"], "--tasks applies to --protocol ruler only, not ppl"),
    (["--protocol", "passkey", "--tasks", "vt"], "--tasks applies to --protocol ruler only, not passkey"),
    (["--protocol", "ruler", "--docs", "2"], "--docs applies to --protocol ppl and last-segment only, not ruler"),
    (["--protocol", "ruler", "--trials", "0"], "--trials must be >= 1, got 0"),
])
@pytest.mark.parametrize("command", ["lm", "hf"])
def test_bad_ruler_options_exit_2_with_one_message_before_the_model_loads(model_dir, tmp_path, capsys,
                                                                         monkeypatch, command, args, message):
    import lengen.hf.evaluate as hf_evaluate
    import lengen.lm.evaluate as lm_evaluate

    monkeypatch.setattr(hf_evaluate, "load", no_model)
    monkeypatch.setattr(lm_evaluate, "load_run", no_model)
    out = tmp_path / "out"
    target = str(tmp_path / "run") if command == "lm" else str(model_dir / "model")
    assert main([command, "eval", target, *args, "--lengths", "800", "--out", str(out), "--no-progress"]) == 2
    assert capsys.readouterr().err == f"lengen: error: {message}\n"
    assert not out.exists()


@pytest.mark.parametrize("command", ["lm", "hf"])
def test_ruler_takes_trials_seed_and_tasks_as_far_as_loading_the_model(model_dir, tmp_path, monkeypatch, command):
    import lengen.hf.evaluate as hf_evaluate
    import lengen.lm.evaluate as lm_evaluate

    monkeypatch.setattr(hf_evaluate, "load", no_model)
    monkeypatch.setattr(lm_evaluate, "load_run", no_model)
    target = str(tmp_path / "run") if command == "lm" else str(model_dir / "model")
    with pytest.raises(ModelLoaded):
        main([command, "eval", target, "--protocol", "ruler", "--trials", "2", "--seed", "4", "--tasks", "cwe",
              "--lengths", "800", "--out", str(tmp_path / "out"), "--no-progress"])


@pytest.mark.parametrize("protocol", ["passkey", "ruler"])
def test_lengths_where_no_prompt_fits_are_refused_before_scoring(lm_run, tmp_path, capsys, monkeypatch,
                                                                 protocol):
    """At 64 and 128 bytes no passkey prompt (247 bytes without filler) and no ruler prompt fits:
    one line naming those lengths, exit 2, no results; a length where one fits is not named."""
    import lengen.lm.evaluate as lm_evaluate

    monkeypatch.setattr(lm_evaluate, f"_{protocol}_rows", lambda *a, **k: pytest.fail("scored"))
    out = tmp_path / "none"
    assert main(["lm", "eval", str(lm_run), "--protocol", protocol, "--lengths", "64,128,2048",
                 "--trials", "1", "--methods", "rope", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lengen: error: lengths 64, 128: no "), err
    assert "2048" not in err and "even without filler" in err and not out.exists()


def test_an_lm_sweep_with_prompt_free_lengths_is_refused_once(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "p", "command": "lm", "grid": {"seed": [0, 1]},
                                    "fixed": {"steps": 2, "train_length": 16},
                                    "eval": {"protocol": "passkey", "lengths": [64, 512], "trials": 1}}))
    assert main(["sweep", "run", str(spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lengen: error: eval: lengths 64: no passkey prompt fits") and err.count("\n") == 1, err


def test_hf_eval_refuses_lengths_where_no_passkey_prompt_fits(model_dir, tmp_path, capsys, monkeypatch):
    import lengen.hf.evaluate as hf_evaluate

    monkeypatch.setattr(hf_evaluate, "_score", lambda *a, **k: pytest.fail("scored"))
    out = tmp_path / "out"
    assert main(["hf", "eval", str(model_dir / "model"), "--protocol", "passkey", "--lengths", "64",
                 "--trials", "1", "--methods", "rope", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lengen: error: lengths 64: no passkey prompt fits") and err.count("\n") == 1, err
