"""CPU threads: OpenMP waits passively on a busy machine, --threads on every CHE command."""

import os
import subprocess
import sys
import time

import pytest
import torch

from lengen._openmp import busy_cores, choose_wait_policy
from lengen.cli import main


def _policy_beside_a_busy_core():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        code = "import os, lengen; print(os.environ.get('OMP_WAIT_POLICY'), '|', lengen.OPENMP_WAIT)"
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True).stdout.strip()
    finally:
        hog.kill()
        hog.wait()


def test_beside_a_busy_core_openmp_waits_passively():
    policy, decision = _policy_beside_a_busy_core().split(" | ")
    assert policy == "PASSIVE" and decision.startswith("passive")


def test_the_decision():
    env = {}
    assert choose_wait_policy(env, measure=lambda: 1.0).startswith("passive") and env == {"OMP_WAIT_POLICY": "PASSIVE"}
    env = {}
    assert choose_wait_policy(env, measure=lambda: 0.2) == "default" and env == {}
    assert choose_wait_policy(env, measure=lambda: None) == "default" and env == {}
    for user in ({"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "1000"}):
        env = dict(user)
        assert choose_wait_policy(env, measure=lambda: 2.0) == "user" and env == user


def test_busy_cores_from_proc_stat_samples():
    # user nice system idle iowait irq softirq steal guest guest_nice
    reads = iter(["cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 ...", "cpu  150 0 150 750 150 0 0 0 0 0\n"])
    # busy +100 of +200 jiffies on 4 cores: 2 cores busy (iowait counts as idle)
    assert busy_cores(read=lambda: next(reads), sleep=lambda s: None, cores=4) == pytest.approx(2.0)
    assert busy_cores(read=lambda: "garbage", sleep=lambda s: None) is None


@pytest.mark.parametrize("command", [["train"], ["demo"], ["eval", "somewhere"],
                                     ["sweep", "run", "spec.yaml", "--out", "o"], ["lm", "train"],
                                     ["lm", "eval", "somewhere"], ["hf", "eval", "somewhere", "--lengths", "4k"]])
def test_threads_must_be_positive(command, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*command, "--threads", "0"]) == 2
    assert "--threads must be >= 1" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_train_threads_sets_torch_threads(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n))
    assert main(["train", "--task", "parity_check", "--steps", "2", "--train-length", "2", "--max-length", "2",
                 "--eval-samples", "2", "--layers", "1", "--d-model", "8", "--heads", "2", "--d-ff", "8",
                 "--no-progress", "--device", "cpu", "--threads", "1", "--out", str(tmp_path / "r")]) == 0
    assert calls == [1]
