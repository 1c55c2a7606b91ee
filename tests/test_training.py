"""Training: learns an easy task, is deterministic, resumes exactly, writes the run files."""

import json

import pytest

from lengen.models import ModelConfig
from lengen.che import loop
from lengen.che.config import TrainConfig
from lengen.che.loop import train


def small_cfg(**kw):
    model = ModelConfig(num_layers=2, num_heads=4, d_model=32, d_ff=64, dropout=0.1, pe=kw.pop("pe", "rope"))
    base = dict(task="parity_check", model=model, steps=30, batch_size=32, train_length=3, max_length=5,
                eval_samples=64, lr=1e-3, checkpoint_every=10, log_every=5, seed=3)
    base.update(kw)
    return TrainConfig(**base)


def test_learns_short_parity_well_above_chance(tmp_path):
    cfg = small_cfg(steps=300, lr=3e-3, max_length=3, eval_samples=256)
    record = train(cfg, tmp_path / "run", progress=False)
    acc = record["accuracy_by_length"]
    # chance is 0.5; a 2-layer encoder solves parity of <= 3 bits
    assert sum(acc.values()) / len(acc) > 0.9, acc


def test_run_directory_files(tmp_path):
    record = train(small_cfg(), tmp_path / "run", progress=False)
    run = tmp_path / "run"
    for name in ("config.json", "metrics.jsonl", "checkpoint.pt", "eval.json", "accuracy.png"):
        assert (run / name).exists(), name
    ev = json.loads((run / "eval.json").read_text())
    assert set(ev["accuracy_by_length"]) == {"1", "2", "3", "4", "5"}
    assert ev["train_length"] == 3 and ev["max_length"] == 5 and ev["test_positions"] == "standard"
    beyond = [ev["accuracy_by_length"][k] for k in ("4", "5")]
    assert ev["score"] == pytest.approx(sum(beyond) / 2)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [5, 10, 15, 20, 25, 30]
    assert record["score"] == ev["score"]


def test_same_seed_same_numbers(tmp_path):
    a = train(small_cfg(positions="randomized"), tmp_path / "a", progress=False)
    b = train(small_cfg(positions="randomized"), tmp_path / "b", progress=False)
    assert a["accuracy_by_length"] == b["accuracy_by_length"]
    assert (tmp_path / "a/metrics.jsonl").read_text().split("seconds")[0] == \
        (tmp_path / "b/metrics.jsonl").read_text().split("seconds")[0]
    train(small_cfg(positions="randomized", seed=4), tmp_path / "c", progress=False)
    ma = [json.loads(line)["loss"] for line in (tmp_path / "a/metrics.jsonl").read_text().splitlines()]
    mc = [json.loads(line)["loss"] for line in (tmp_path / "c/metrics.jsonl").read_text().splitlines()]
    assert ma != mc


def losses(path):
    return [(r["step"], r["loss"], r["accuracy"]) for r in map(json.loads, path.read_text().splitlines())]


def test_resume_after_interruption_matches_uninterrupted(tmp_path, monkeypatch):
    cfg = small_cfg(positions="randomized", steps=30)
    straight = train(cfg, tmp_path / "straight", progress=False)

    real_step = loop.train_step
    calls = {"n": 0}

    def interrupted_step(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 24:  # killed between the checkpoints at 20 and 30
            raise KeyboardInterrupt
        return real_step(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", interrupted_step)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "resumed", progress=False)
    monkeypatch.setattr(loop, "train_step", real_step)
    resumed = train(cfg, tmp_path / "resumed", progress=False)
    assert resumed["accuracy_by_length"] == straight["accuracy_by_length"]
    assert losses(tmp_path / "resumed/metrics.jsonl") == losses(tmp_path / "straight/metrics.jsonl")


def test_extending_steps_continues_the_run(tmp_path):
    train(small_cfg(steps=10), tmp_path / "run", progress=False)
    train(small_cfg(steps=20), tmp_path / "run", progress=False)
    straight = train(small_cfg(steps=20), tmp_path / "straight", progress=False)
    assert losses(tmp_path / "run/metrics.jsonl") == losses(tmp_path / "straight/metrics.jsonl")
    del straight
