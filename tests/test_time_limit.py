"""`lengen sweep run --time-limit`: past the deadline every training loop (CHE, group, language
model) saves a checkpoint at its current step and stops, and the rerun ends where an uninterrupted
run ends; the sweep reports the stopped runs and exits with status 3."""

import json
import re
import time

import pytest
import torch

from lengen.cli import main
from lengen.io import load_torch
from lengen.training import deadline
from lengen.training.deadline import DeadlineReached
from lengen.che.group import train_group
from lengen.che.loop import train
from test_group_training import tiny, weight_diffs
from test_sweeps import TIMING, read_csv, write_spec


def passes_after(monkeypatch, checks: int):
    """The deadline passes at the `checks`-th check: loops check once per step, so it is the step."""
    calls = []

    def fake() -> bool:
        calls.append(1)
        return len(calls) >= checks

    monkeypatch.setattr(deadline, "passed", fake)


def metrics(path):
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in path.read_text().splitlines()]


def test_the_deadline_is_a_time_and_is_restored_on_exit():
    assert not deadline.passed()
    with deadline.deadline(time.time() - 1):
        assert deadline.passed()
        assert not deadline.stop_here(30, 30)   # the last step finishes the run: nothing to stop
        with deadline.deadline(time.time() + 3600):
            assert not deadline.passed()
        assert deadline.passed()
    assert not deadline.passed()
    with deadline.deadline(None):
        assert not deadline.passed()


def test_che_training_stops_mid_window_with_a_checkpoint_and_resumes_exactly(tmp_path, monkeypatch):
    cfg = tiny("rope", 0, 1e-3, positions="randomized", steps=30, checkpoint_every=10, log_every=5)
    straight = train(cfg, tmp_path / "straight", progress=False)
    with monkeypatch.context() as m:
        passes_after(m, 23)   # between the checkpoints at 20 and 30, inside the log window 20-25
        with pytest.raises(DeadlineReached, match="stopped at step 23 of 30"):
            train(cfg, tmp_path / "stopped", progress=False)
    assert load_torch(tmp_path / "stopped" / "checkpoint.pt")["step"] == 23
    resumed = train(cfg, tmp_path / "stopped", progress=False)
    assert resumed["accuracy_by_length"] == straight["accuracy_by_length"]
    assert max(weight_diffs(tmp_path / "straight", tmp_path / "stopped").values()) == 0.0
    assert metrics(tmp_path / "stopped" / "metrics.jsonl") == metrics(tmp_path / "straight" / "metrics.jsonl")


def test_a_group_stops_every_member_at_the_same_step_and_resumes_exactly(tmp_path, monkeypatch):
    cfgs = [tiny("alibi", s, lr, steps=30, checkpoint_every=10, log_every=5) for s, lr in [(0, 3e-4), (1, 1e-3)]]
    straight = train_group(cfgs, [tmp_path / f"s{i}" for i in range(2)], progress=False)
    outs = [tmp_path / f"r{i}" for i in range(2)]
    with monkeypatch.context() as m:
        passes_after(m, 17)
        with pytest.raises(DeadlineReached, match="stopped at step 17 of 30"):
            train_group(cfgs, outs, progress=False)
    assert [load_torch(o / "checkpoint.pt")["step"] for o in outs] == [17, 17]
    resumed = train_group(cfgs, outs, progress=False)
    for i in range(2):
        assert resumed[i]["accuracy_by_length"] == straight[i]["accuracy_by_length"]
        assert max(weight_diffs(tmp_path / f"s{i}", outs[i]).values()) == 0.0
        assert metrics(outs[i] / "metrics.jsonl") == metrics(tmp_path / f"s{i}" / "metrics.jsonl")


def test_language_model_training_stops_and_resumes_to_the_same_weights(tmp_path, monkeypatch):
    from tiny_lm import TINY

    def lm_train(out):
        return main(["lm", "train", *TINY, "--steps", "6", "--out", str(out)])

    assert lm_train(tmp_path / "straight") == 0
    with monkeypatch.context() as m:
        passes_after(m, 4)   # after step 4: between the checkpoints at 3 and 6
        assert lm_train(tmp_path / "stopped") == 2   # `lengen lm train` has no time limit: an error line
    assert load_torch(tmp_path / "stopped" / "checkpoint.pt")["step"] == 4
    assert lm_train(tmp_path / "stopped") == 0
    a = load_torch(tmp_path / "straight" / "checkpoint.pt")["model"]
    b = load_torch(tmp_path / "stopped" / "checkpoint.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert metrics(tmp_path / "stopped" / "metrics.jsonl") == metrics(tmp_path / "straight" / "metrics.jsonl")


def test_a_sweep_past_its_time_limit_exits_3_and_the_rerun_gives_the_uninterrupted_tables(tmp_path, monkeypatch,
                                                                                           capsys):
    spec = write_spec(tmp_path / "s.yaml", {"pe": ["rope", "alibi"], "seed": [0, 1]}, {"steps": 20})
    args = ["sweep", "run", str(spec), "--workers", "1", "--device", "cpu", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "ref")]) == 0
    out = str(tmp_path / "limited")
    with monkeypatch.context() as m:
        # checks: a job's start, then each step but the last: the first run 1 + 19, the second's
        # start is the 21st and its 10th step the 31st; the last two jobs see it at their start
        passes_after(m, 31)
        assert main([*args, "--out", out, "--time-limit", "25"]) == 3
    printed = capsys.readouterr().out
    # the second run stopped at its 10th step, the last two never started: of the 3 pending runs,
    # 1 has a checkpoint, and the summary counts as `sweep status` does (it said "3 runs ... with a checkpoint")
    assert "1 done, 0 failed, 3 pending (1 with a checkpoint to resume)" in printed
    assert "time limit stopped the sweep" in printed and "rerun the same command to resume" in printed
    steps = sorted(load_torch(p)["step"] for p in (tmp_path / "limited" / "runs").glob("*/checkpoint.pt"))
    assert steps == [10, 20], steps
    assert main(["sweep", "status", out]) == 0
    assert "1 done, 0 running, 0 failed, 3 pending (1 with a checkpoint to resume)" in capsys.readouterr().out
    assert main([*args, "--out", out]) == 0
    ref, again = (read_csv(tmp_path / d / "results.csv", TIMING) for d in ("ref", "limited"))
    assert again == ref and len(ref) == 4
    assert (tmp_path / "limited" / "accuracy_by_length.csv").read_bytes() == \
        (tmp_path / "ref" / "accuracy_by_length.csv").read_bytes()


@pytest.mark.parametrize("value", ["0", "-5", "inf", "nan"])
def test_a_bad_time_limit_is_one_line_before_anything_is_written(tmp_path, capsys, value):
    spec = write_spec(tmp_path / "s.yaml", {"seed": [0]})
    out = tmp_path / "out"
    assert main(["sweep", "run", str(spec), "--out", str(out), "--time-limit", value]) == 2
    err = capsys.readouterr().err
    assert re.search(r"--time-limit must be a (positive|finite) number", err) and "Traceback" not in err
    assert not out.exists()
