"""`lengen env` and `lengen --version` report what is installed, checked against the libraries'
own version attributes and git."""

import importlib.metadata
import json
import platform
import subprocess
from pathlib import Path

import numpy
import pytest
import torch

import lengen
from lengen.cli import main
from lengen.environment import version_of

ROOT = Path(lengen.__file__).resolve().parent.parent


def run_cli(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as e:   # argparse's --version action exits
        code = e.code
    return code, capsys.readouterr().out


def test_env_json_matches_the_libraries_own_versions(capsys, no_gpu):
    code, out = run_cli(capsys, "env", "--json")
    info = json.loads(out)
    assert code == 0
    assert info["lengen"] == lengen.__version__
    assert info["torch"] == torch.__version__
    assert info["numpy"] == numpy.__version__
    assert info["python"] == platform.python_version()
    assert info["torch_threads"] == str(torch.get_num_threads())
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()   # the CPU kernels: AVX2, ...
    assert info["cuda_devices"] is None          # no_gpu: torch sees none
    transformers = pytest.importorskip("transformers")
    assert info["transformers"] == transformers.__version__


def test_env_table_has_one_line_per_field(capsys, no_gpu):
    code, out = run_cli(capsys, "env")
    lines = dict(line.split(None, 1) for line in out.strip().splitlines())
    assert code == 0 and lines["torch"] == torch.__version__ and lines["cuda_devices"] == "-"


def test_version_is_one_line_with_torch_cuda_and_transformers(capsys, no_gpu):
    code, out = run_cli(capsys, "--version")
    assert code == 0 and len(out.strip().splitlines()) == 1
    assert out.startswith(f"lengen {lengen.__version__}")
    assert f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none'}; GPUs: none)" in out
    assert f"transformers {version_of('transformers') or 'not installed'}" in out


def test_a_missing_distribution_has_no_version():
    assert version_of("lengen-no-such-distribution") is None


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="lengen is not a git checkout here")
def test_the_commit_is_the_checkout_head(capsys):
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    info = json.loads(run_cli(capsys, "env", "--json")[1])
    assert head.startswith(info["lengen_commit"].removesuffix("+changes"))


TINY_TRAIN = ["--task", "parity_check", "--steps", "4", "--batch-size", "8", "--train-length", "3",
              "--max-length", "5", "--eval-samples", "8", "--layers", "1", "--heads", "2", "--d-model", "8",
              "--d-ff", "16", "--checkpoint-every", "2", "--log-every", "2", "--no-progress", "--device", "cpu"]


def _installed(distribution):
    try:
        return importlib.metadata.distribution(distribution).version
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.mark.parametrize("threads", [1, 2])
def test_a_runs_record_names_its_thread_count_device_and_versions(tmp_path, threads):
    """The CPU thread count changes a run's numbers (docs/results/demo.md), so eval.json records it,
    with the device, torch and the lengen commit that computed them."""
    out = tmp_path / "run"
    before = torch.get_num_threads()
    try:
        assert main(["train", *TINY_TRAIN, "--threads", str(threads), "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(before)
    env = json.loads((out / "eval.json").read_text())["environment"]
    assert env["threads"] == threads and env["device"] == "cpu" and env["torch"] == torch.__version__
    assert env["lengen"] == lengen.__version__ and env["python"] == platform.python_version()
    assert env["transformers"] == _installed("transformers")
    if (ROOT / ".git").exists():
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        assert head.startswith(env["lengen_commit"].removesuffix("+changes"))
