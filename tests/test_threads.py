"""CPU threads: passive OpenMP waiting by default (a shared machine), --threads on every CHE command."""

import os
import subprocess
import sys

import pytest
import torch

from lengen.cli import main


def _policy(env_value):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_value is not None:
        env["OMP_WAIT_POLICY"] = env_value
    code = "import os, lengen, torch; print(os.environ['OMP_WAIT_POLICY'])"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_importing_lengen_makes_openmp_wait_passively_unless_the_user_says_otherwise():
    assert _policy(None) == "PASSIVE"
    assert _policy("ACTIVE") == "ACTIVE"


@pytest.mark.parametrize("command", [["train"], ["demo"], ["eval", "somewhere"],
                                     ["sweep", "run", "spec.yaml", "--out", "o"]])
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
