"""`lengen lm train` / `lengen lm eval` end to end on a tiny model and a small corpus."""

import json
import re

import pandas as pd
import pytest
import torch

import lengen.cli.lm as lm_cli
import lengen.lm.evaluate as evaluate_mod
import lengen.lm.train as train_mod
from lengen.cli import main
from lengen.lm.model import DecoderLM
from tiny_lm import TINY
from guards import interrupt_on_call, ModelLoaded, no_model



pytestmark = pytest.mark.usefixtures("private_cache")


def train(out, *extra):
    return main(["lm", "train", *TINY, "--steps", "6", "--out", str(out), *extra])


def test_train_writes_the_run_dir(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out) == 0
    assert {p.name for p in out.iterdir()} >= {"config.json", "checkpoint.pt", "metrics.jsonl", "eval.json"}
    ev = json.loads((out / "eval.json").read_text())
    assert ev["steps"] == 6 and ev["val_ppl"] > 1 and ev["unigram_ppl"] > 1 and ev["train_length"] == 16
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 6]
    text = capsys.readouterr().out
    assert "validation perplexity" in text and "unigram" in text
    # the two perplexities lengen reports measure different text, and both say which
    assert "most start mid-document" in ev["val_measured_on"] and "mid-document" in text
    assert ev["environment"]["device"] == "cpu" and ev["environment"]["threads"] >= 1


def test_interrupted_run_resumes_to_the_same_weights(tmp_path, monkeypatch):
    assert train(tmp_path / "straight") == 0
    with monkeypatch.context() as m:
        m.setattr(train_mod, "sample_windows", interrupt_on_call(train_mod.sample_windows, 5))
        assert train(tmp_path / "resumed") == 130  # killed after the checkpoint at step 3
    assert torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=False)["step"] == 3
    assert train(tmp_path / "resumed") == 0       # the same command resumes
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=False)
    assert b["step"] == 6 and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert (tmp_path / "straight" / "metrics.jsonl").read_text().count("step") == \
        (tmp_path / "resumed" / "metrics.jsonl").read_text().count("step")


def test_eval_writes_results_per_method_and_length(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out) == 0
    ev = tmp_path / "ev"
    assert main(["lm", "eval", str(out), "--methods", "rope,pi:factor=2,yarn:factor=4,beta_fast=16,rerope:window=8+logn",
                 "--lengths", "16,32,64", "--docs", "2", "--out", str(ev), "--no-progress"]) == 0
    df = pd.read_csv(ev / "results.csv")
    assert {"method", "length", "ppl"} <= set(df.columns) and len(df) == 12
    assert sorted(set(df["method"])) == sorted(["rope", "pi:factor=2", "yarn:factor=4,beta_fast=16", "rerope:window=8+logn"])
    assert sorted(set(df["length"])) == [16, 32, 64] and (df["ppl"] > 1).all()
    assert (ev / "ppl_vs_length.png").stat().st_size > 0
    assert json.loads((ev / "results.json").read_text())["rows"][0]["method"] == "rope"
    printed = capsys.readouterr().out
    assert "| rope" in printed
    assert "measured on: the first L tokens of each validation document (from its start)" in printed
    # last-segment, default methods (factor = 48 / 16): every length scores the same K tokens
    assert main(["lm", "eval", str(out), "--protocol", "last-segment", "--segment", "8", "--lengths", "16,48",
                 "--docs", "2", "--out", str(tmp_path / "seg"), "--no-progress"]) == 0
    seg = pd.read_csv(tmp_path / "seg" / "results.csv")
    docs = json.loads((tmp_path / "seg" / "results.json").read_text())["docs_used"]
    assert list(dict.fromkeys(seg["method"])) == ["rope", "pi:factor=3", "ntk:factor=3", "yarn:factor=3",
                                                   "rerope", "self_extend"]
    assert set(seg["tokens"]) == {8 * docs} and set(seg["segment"]) == {8}
    # passkey: accuracy rows (a 6-step byte model finds no key, and that is the honest answer)
    assert main(["lm", "eval", str(out), "--protocol", "passkey", "--lengths", "300", "--trials", "2",
                 "--methods", "rope,dynamic:factor=2", "--out", str(tmp_path / "pk"), "--no-progress"]) == 0
    pk = pd.read_csv(tmp_path / "pk" / "results.csv")
    assert list(pk["method"]) == ["rope", "dynamic:factor=2"] and pk["accuracy"].between(0, 1).all()


@pytest.mark.parametrize("args,message", [
    (["--steps", "-1"], "steps must be >= 0"),
    (["--steps", "2", "--pe", "nope"], "unknown positional encoding 'nope'"),
    (["--steps", "2", "--corpus", "/nonexistent/**/*.txt"], "matches no files"),
])
def test_train_bad_input(tmp_path, capsys, args, message):
    out = tmp_path / "run"
    assert main(["lm", "train", *TINY, *args, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err and not out.exists()


def test_eval_bad_input(tmp_path, capsys):
    rope, alibi = tmp_path / "rope", tmp_path / "alibi"
    assert train(rope) == 0 and train(alibi, "--pe", "alibi") == 0
    assert train(rope, "--seed", "1") == 2
    assert "holds another config" in capsys.readouterr().err
    assert main(["lm", "eval", str(alibi), "--methods", "yarn:factor=4", "--no-progress"]) == 2
    assert "needs a RoPE model" in capsys.readouterr().err
    assert main(["lm", "eval", str(rope), "--methods", "warp:factor=2", "--no-progress"]) == 2
    assert "unknown extrapolation method 'warp'" in capsys.readouterr().err
    assert main(["lm", "eval", str(rope), "--segment", "4", "--no-progress"]) == 2
    # plain evaluation of a non-RoPE model works
    assert main(["lm", "eval", str(alibi), "--methods", "base", "--lengths", "16,64", "--docs", "1",
                 "--out", str(tmp_path / "ev"), "--no-progress"]) == 0
    assert list(pd.read_csv(tmp_path / "ev" / "results.csv")["method"]) == ["base", "base"]


def test_lengths_a_model_cannot_take_become_noted_nan_rows(tmp_path):
    run = tmp_path / "learned"
    assert train(run, "--pe", "learned", "--max-position", "32") == 0
    assert main(["lm", "eval", str(run), "--lengths", "16,64", "--docs", "1", "--out", str(tmp_path / "ev"),
                 "--no-progress"]) == 0
    df = pd.read_csv(tmp_path / "ev" / "results.csv")
    assert df["ppl"].notna().tolist() == [True, False] and "max_position" in df["note"][1]
    assert json.loads((tmp_path / "ev" / "results.json").read_text())["rows"][1]["ppl"] is None


# -- passkey through the CLI with a stand-in for the model's greedy decoder ----------------------

NEEDLE = re.compile(r"The pass key is (\d+)\. Remember it\. \1 is the pass key\.")


def oracle(ids, n):
    """Reads the key out of the prompt (raw bytes, a pattern of its own) and answers it."""
    (key,) = NEEDLE.findall(bytes(ids).decode())
    return list(f" {key}. The grass".encode())[:n]


def constant(ids, n):
    return list(b" 0. The grass")[:n]   # keys are 1..50000: never right


@pytest.mark.parametrize("answer,accuracy", [(oracle, 1.0), (constant, 0.0)])
def test_passkey_eval_scores_an_oracle_one_and_a_constant_zero(tmp_path, monkeypatch, answer, accuracy):
    run = tmp_path / "run"
    assert train(run) == 0
    prompts = []

    def generate_fn(self, method=None):   # what lm eval asks the model for, once per method
        def generate(ids, n):
            prompts.append(list(ids))
            return answer(ids, n)
        return generate

    monkeypatch.setattr(DecoderLM, "generate_fn", generate_fn)
    out = tmp_path / "pk"
    assert main(["lm", "eval", str(run), "--protocol", "passkey", "--lengths", "300,500", "--trials", "3",
                 "--methods", "rope,yarn:factor=2", "--out", str(out), "--no-progress"]) == 0
    assert len(prompts) == 2 * 2 * 3   # methods x lengths x trials
    df = pd.read_csv(out / "results.csv")
    assert list(zip(df["method"], df["length"])) == [("rope", 300), ("rope", 500), ("yarn:factor=2", 300),
                                                     ("yarn:factor=2", 500)]
    assert df["accuracy"].tolist() == [accuracy] * 4 and df["trials"].tolist() == [3] * 4
    result = json.loads((out / "results.json").read_text())
    assert [r["accuracy"] for r in result["rows"]] == [accuracy] * 4
    keys = [int(NEEDLE.search(bytes(p).decode()).group(1)) for p in prompts]
    assert [r["key"] for r in result["trial_records"]] == keys
    assert all(r["answer"] == (r["key"] if answer is oracle else 0) for r in result["trial_records"])


# -- options a protocol does not use ----------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--segment", "8"], "--segment applies to --protocol last-segment only, not ppl"),
    (["--protocol", "passkey", "--segment", "8"], "--segment applies to --protocol last-segment only, not passkey"),
    (["--protocol", "passkey", "--batch-size", "2"],
     "--batch-size applies to --protocol ppl and last-segment only, not passkey"),
    (["--protocol", "passkey", "--docs", "2"], "--docs applies to --protocol ppl and last-segment only, not passkey"),
    (["--trials", "3"], "--trials applies to --protocol passkey and ruler only, not ppl"),
    (["--protocol", "last-segment", "--seed", "1"], "--seed applies to --protocol passkey and ruler only, not last-segment"),
    (["--protocol", "last-segment", "--segment", "0"], "--segment must be >= 1, got 0"),
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--docs", "-1"], "--docs must be >= 1, got -1"),
    (["--protocol", "passkey", "--trials", "0"], "--trials must be >= 1, got 0"),
    (["--protocol", "passkey", "--seed", "-1"], "--seed must be >= 0, got -1"),
])
def test_eval_refuses_options_the_protocol_ignores_before_loading_the_model(tmp_path, capsys, monkeypatch,
                                                                            args, message):
    monkeypatch.setattr(evaluate_mod, "load_run", no_model)
    assert main(["lm", "eval", str(tmp_path / "run"), *args, "--no-progress"]) == 2
    assert capsys.readouterr().err == f"lengen: error: {message}\n"


@pytest.mark.parametrize("args,given", [
    ([], {"docs": 16, "batch_size": 1, "segment": None, "trials": 20, "seed": 0}),   # the defaults
    (["--docs", "3", "--batch-size", "2"], {"docs": 3, "batch_size": 2}),
    (["--protocol", "last-segment", "--segment", "8", "--docs", "3", "--batch-size", "2"],
     {"segment": 8, "docs": 3, "batch_size": 2}),
    (["--protocol", "passkey", "--trials", "3", "--seed", "7"], {"trials": 3, "seed": 7, "docs": 16}),
])
def test_eval_passes_the_options_a_protocol_uses_on(tmp_path, monkeypatch, args, given):
    seen = {}

    def evaluate_lm(run_dir, ecfg, *a, **k):
        seen.update(vars(ecfg))
        raise ModelLoaded

    with monkeypatch.context() as m:
        m.setattr(lm_cli, "evaluate_lm", evaluate_lm)   # where the command looks it up
        with pytest.raises(ModelLoaded):
            main(["lm", "eval", str(tmp_path / "run"), *args, "--no-progress"])
    assert {k: seen[k] for k in given} == given
    # and the real evaluate_lm gets as far as loading the model with them
    monkeypatch.setattr(evaluate_mod, "load_run", no_model)
    with pytest.raises(ModelLoaded):
        main(["lm", "eval", str(tmp_path / "run"), *args, "--no-progress"])
