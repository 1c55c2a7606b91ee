"""Training and evaluation of the arithmetic decoder: the loss targets by hand, greedy decoding
scored against an oracle that answers from Python's integers (and one that fails on carries),
the positions decoding feeds, resume, and the command line's refusals."""

import re
import time

import numpy as np
import pytest
import torch
from torch import nn

from lengen.arith.batch import IGNORE, collate
from lengen.arith.config import ArithConfig
from lengen.arith.evaluate import evaluate_model
from lengen.arith.formats import encode
from lengen.arith.options import arith_config_from_options
from lengen.arith.problem import Problem
from lengen.arith.train import train_arith
from lengen.arith.vocab import EOS, SYMBOLS, VOCAB_SIZE, decode
from lengen.cli import main


def test_loss_targets_are_the_answer_and_eos_only():
    batch = collate([encode(Problem((98, 45), "+", 143, (2, 2), 3), "reversed"),
                     encode(Problem((5, 7), "+", 12, (1, 1), 2), "reversed")])
    assert decode(batch.tokens[0]) == "<s>89+54=341</s>" and decode(batch.tokens[1]) == "<s>5+7=21</s>___"
    # input index i predicts token i + 1: '=' (index 6) predicts the first answer digit
    assert batch.targets[0].tolist() == [IGNORE] * 6 + [3, 4, 1, EOS]
    assert batch.targets[1].tolist() == [IGNORE] * 4 + [2, 1, EOS] + [IGNORE] * 3


def padded_width(operands: list[str], op: str, fmt: str) -> int:
    """Digits of the widest answer operands of these lengths can have (the padded format's width)."""
    values = [int(x[::-1]) if fmt == "reversed" else int(x) for x in operands]
    digits = [len(str(v)) for v in values]   # the true digit counts, leading zeros of the padding dropped
    widest = sum(10 ** d - 1 for d in digits) if op == "+" else (10 ** digits[0] - 1) * (10 ** digits[1] - 1)
    return len(str(widest))


def answer_text(operands: list[str], op: str, fmt: str) -> str:
    """What follows '=' in format `fmt`, computed from the prompt's digits with Python ints."""
    values = [int(x[::-1]) if fmt == "reversed" else int(x) for x in operands]
    result = sum(values) if op == "+" else values[0] * values[1]
    if fmt == "plain":
        return str(result)
    if fmt == "reversed":
        return str(result)[::-1]
    return str(result).zfill(padded_width(operands, op, fmt))[::-1]


class Oracle(nn.Module):
    """Predicts the right next token from the prompt with Python ints (optionally wrong whenever a
    carry leaves the longest operand's width), checking the positions it is fed."""

    def __init__(self, fmt: str, positions: str, wrong_on_carry: bool = False):
        super().__init__()
        self.fmt, self.positions, self.wrong_on_carry = fmt, positions, wrong_on_carry
        self.dummy = nn.Parameter(torch.zeros(1))
        self.calls = 0

    def forward(self, tokens, positions, abacus_ids=None):
        self.calls += 1
        logits = torch.zeros(tokens.shape[0], tokens.shape[1], VOCAB_SIZE)
        for row in range(tokens.shape[0]):
            text = decode(tokens[row])
            if text.endswith("</s>") or "</s>" in text.split("=")[-1]:   # done: what follows is never read
                logits[row, -1, EOS] = 1.0
                continue
            m = re.fullmatch(r"<s>([0-9+*]+)=([0-9]*)", text)
            op = "*" if "*" in m.group(1) else "+"
            operands = m.group(1).split(op)
            answer = answer_text(operands, op, self.fmt) + "</s>"
            done = len(m.group(2))
            if self.positions == "coupled" and done:
                # the last token is answer slot done - 1; Cho et al.'s code, s = 1: end = s + width, slot j
                # gets end - 1 - j
                assert int(positions[row, -1]) == 1 + padded_width(operands, op, self.fmt) - 1 - (done - 1)
            if abacus_ids is not None and done:        # the answer's digits count from 1
                assert int(abacus_ids[row, -1]) == done
            nxt = answer[done] if answer[done] != "<" else "</s>"
            if self.wrong_on_carry and len(answer) - 4 > max(map(len, operands)) and nxt != "</s>":
                nxt = "0" if nxt != "0" else "1"
            logits[row, -1, SYMBOLS.index(nxt)] = 1.0
        return logits


@pytest.mark.parametrize("fmt,positions,pe", [("reversed", "standard", "abacus"), ("padded", "coupled", "learned"),
                                              ("plain", "standard", "rope"), ("reversed", "coupled", "abacus+rope")])
def test_greedy_decoding_scores_an_oracle_perfectly(fmt, positions, pe):
    cfg = ArithConfig(format=fmt, positions=positions, pe=pe, eval_samples=6, eval_batch=7)
    cfg.validate()
    began = time.perf_counter()
    result = evaluate_model(Oracle(fmt, positions), cfg, 4, 6, 0, torch.device("cpu"))
    assert 0 < result["eval_seconds"] <= time.perf_counter() - began + 0.001   # rounded to ms
    assert len(result["cells"]) == 16 and all(c["total"] == 6 and c["accuracy"] == 1.0 for c in result["cells"])
    assert result["accuracy_by_length"] == {"1": 1.0, "2": 1.0, "3": 1.0, "4": 1.0}


@pytest.mark.parametrize("fmt", ["reversed", "padded", "plain"])
@pytest.mark.parametrize("task,options", [("multiplication", {}), ("multiplication", {"b_digits": 1}),
                                          ("multi_addition", {"max_operands": 4})])
def test_greedy_decoding_of_the_other_tasks(task, options, fmt):
    cfg = ArithConfig(task=task, format=fmt, pe="abacus", eval_samples=4, **options)
    cfg.validate()
    result = evaluate_model(Oracle(fmt, "standard"), cfg, 3, 4, 0, torch.device("cpu"))
    assert len(result["cells"]) == {"multiplication": 3 if options else 9, "multi_addition": 9}[task]
    assert all(c["accuracy"] == 1.0 for c in result["cells"])


def test_evaluation_counts_an_oracle_that_fails_on_carries():
    cfg = ArithConfig(eval_samples=30)
    result = evaluate_model(Oracle("reversed", "standard", wrong_on_carry=True), cfg, 3, 30, 5, torch.device("cpu"))
    # the problems, drawn again from the documented streams, carried past the longest operand or not
    for c in result["cells"]:
        rng = np.random.default_rng([5, c["i"], c["j"]])
        from lengen.arith import get_arith_task
        task = get_arith_task("addition")
        problems = [task.problem((c["i"], c["j"]), rng) for _ in range(30)]
        no_carry = sum(len(str(p.answer)) == max(c["i"], c["j"]) for p in problems)
        assert c["correct"] == no_carry, c


def tiny(**options) -> ArithConfig:
    base = {"layers": 1, "d_model": 16, "heads": 2, "d_ff": 32, "steps": 6, "batch_size": 8, "log_every": 2,
            "checkpoint_every": 3, "eval_samples": 2, "test_digits": 3, "train_digits": 2, "warmup": 2,
            "device": "cpu"}
    return arith_config_from_options({**base, **options})


@pytest.mark.parametrize("pe,positions,fmt", [("abacus", "standard", "reversed"), ("learned", "coupled", "padded"),
                                              ("abacus+fire", "standard", "reversed"), ("rope", "coupled", "reversed")])
def test_a_run_resumed_ends_where_an_uninterrupted_one_does(tmp_path, pe, positions, fmt):
    whole = train_arith(tiny(pe=pe, positions=positions, format=fmt), tmp_path / "whole", progress=False)
    def stop(step, row):
        if step == 4:   # after the checkpoint at step 3
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_arith(tiny(pe=pe, positions=positions, format=fmt), tmp_path / "part", progress=False, on_log=stop)
    resumed = train_arith(tiny(pe=pe, positions=positions, format=fmt), tmp_path / "part", progress=False)
    assert resumed["train_loss"] == whole["train_loss"] and resumed["cells"] == whole["cells"]
    a = torch.load(tmp_path / "whole" / "checkpoint.pt")["model"]
    b = torch.load(tmp_path / "part" / "checkpoint.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_arith_eval_repeats_the_runs_evaluation(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["arith", "train", "--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--steps", "4",
                 "--train-digits", "2", "--test-digits", "3", "--eval-samples", "3", "--out", str(out),
                 "--no-progress", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "exact match (%), digits of a down, digits of b across" in printed
    assert main(["arith", "eval", str(out), "--no-progress", "--out", str(tmp_path / "e.json")]) == 0
    import json
    again = json.loads((tmp_path / "e.json").read_text())
    trained = json.loads((out / "eval.json").read_text())
    assert again["cells"] == trained["cells"]
    assert (tmp_path / "e.png").stat().st_size > 0


@pytest.mark.parametrize("argv,message", [
    (["--task", "subtraction"], "unknown arithmetic task 'subtraction'"),
    (["--train-digits", "0"], "train-digits must be >= 1"),
    (["--test-digits", "-1"], "test-digits must be >= 1"),
    (["--pe", "none", "--positions", "coupled"], "--positions coupled gives ids to a positional encoding"),
    (["--pe", "abacus", "--positions", "coupled"], "has none that reads them (NoPE)"),
    (["--pe", "rope", "--positions", "coupled", "--format", "plain"], "not plain"),
    (["--pe", "abacus+rope+fire"], "give one encoding"),
    (["--pe", "abacus+nope"], "unknown pe 'abacus+nope' (did you mean 'abacus+none'?)"),
    (["--positions", "shuffled"], "unknown arithmetic position source 'shuffled'"),
    (["--format", "spaced"], "unknown format 'spaced'"),
    (["--pe", "learned", "--test-digits", "30"], "learned position table has 64 rows"),
    (["--pe", "learned", "--positions", "coupled", "--format", "padded", "--test-digits", "70"], "need max-position >= 73"),
    (["--b-digits", "1"], "b-digits applies to task multiplication only"),
    (["--task", "multi_addition", "--max-operands", "1"], "max-operands must be >= 2"),
    (["--abacus-k", "2000"], "past the table's 1024 rows"),
])
def test_bad_input_is_one_line_and_exit_2_before_training(tmp_path, capsys, argv, message):
    out = tmp_path / "run"
    assert main(["arith", "train", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()
