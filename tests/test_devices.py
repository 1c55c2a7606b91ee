"""Devices and precision for the CHE commands: specs, the missing-GPU error, the default equals
--device cpu here, checkpoints carry the random state of the device they were trained on."""

import json

import pytest
import torch

from lengen.cli import main
from lengen.devices import precision_context, resolve_device
from lengen.errors import LengenError

TINY = ["--task", "parity_check", "--steps", "12", "--batch-size", "8", "--train-length", "3", "--max-length",
        "5", "--eval-samples", "16", "--layers", "1", "--heads", "2", "--d-model", "8", "--d-ff", "16",
        "--checkpoint-every", "6", "--log-every", "3", "--no-progress"]

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error when torch sees no GPU")


def test_device_specs():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    for bad in ("gpu", "cuda:x", "tpu", "cuda:-1"):
        with pytest.raises(LengenError, match="unknown device"):
            resolve_device(bad)


@no_gpu
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:7"])
def test_missing_gpu_is_an_error(spec):
    with pytest.raises(LengenError, match="torch sees no CUDA GPU"):
        resolve_device(spec)


@no_gpu
@pytest.mark.parametrize("command", [
    ["train", *TINY],
    ["demo", "--steps", "2", "--max-length", "3", "--train-length", "2", "--no-progress"],
])
def test_cuda_without_gpu_one_line_exit_2_nothing_written(command, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*command, "--out", str(out), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "torch sees no CUDA GPU" in err
    assert not out.exists()


@no_gpu
def test_eval_and_sweep_on_a_missing_gpu(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY, "--out", str(run), "--device", "cpu"]) == 0
    before = sorted(p.name for p in run.iterdir())
    assert main(["eval", str(run), "--device", "cuda", "--no-progress"]) == 2
    assert "torch sees no CUDA GPU" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == before
    spec = tmp_path / "s.yaml"
    spec.write_text("grid: {seed: [0, 1]}\nfixed: {task: parity_check, steps: 2, layers: 1, d_model: 8, heads: 2}\n")
    assert main(["sweep", "run", str(spec), "--out", str(tmp_path / "sw"), "--device", "cuda"]) == 2
    assert "torch sees no CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "sw").exists()


def test_device_cpu_equals_the_default_here(tmp_path):
    assert main(["train", *TINY, "--out", str(tmp_path / "default")]) == 0
    assert main(["train", *TINY, "--out", str(tmp_path / "cpu"), "--device", "cpu"]) == 0
    a = json.loads((tmp_path / "default/eval.json").read_text())
    b = json.loads((tmp_path / "cpu/eval.json").read_text())
    if not torch.cuda.is_available():  # the default is the CPU only where torch sees no GPU
        assert a["accuracy_by_length"] == b["accuracy_by_length"] and a["device"] == b["device"] == "cpu"
        wa = torch.load(tmp_path / "default/checkpoint.pt", weights_only=False)["model"]
        wb = torch.load(tmp_path / "cpu/checkpoint.pt", weights_only=False)["model"]
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_checkpoint_random_state_holds_the_device_generator(tmp_path):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert main(["train", *TINY, "--out", str(tmp_path / "run"), "--device", device]) == 0
    rng = torch.load(tmp_path / "run/checkpoint.pt", weights_only=False)["rng"]
    assert set(rng) == {"numpy", "positions", "torch", "cuda"}
    assert isinstance(rng["torch"], torch.Tensor) and isinstance(rng["positions"], torch.Tensor)
    if device == "cuda":
        assert isinstance(rng["cuda"], torch.Tensor) and rng["cuda"].dtype == torch.uint8
    else:
        assert rng["cuda"] is None


def test_bf16_autocasts_the_forward_pass_and_still_learns(tmp_path):
    lin = torch.nn.Linear(4, 4)
    with precision_context("bf16", torch.device("cpu")):
        assert lin(torch.randn(2, 4)).dtype == torch.bfloat16
    with precision_context("fp32", torch.device("cpu")):
        assert lin(torch.randn(2, 4)).dtype == torch.float32
    args = ["--task", "parity_check", "--steps", "150", "--lr", "3e-3", "--batch-size", "32", "--train-length", "3",
            "--max-length", "3", "--eval-samples", "128", "--layers", "2", "--heads", "4", "--d-model", "32",
            "--d-ff", "64", "--log-every", "10", "--no-progress", "--device", "cpu", "--precision", "bf16"]
    assert main(["train", *args, "--out", str(tmp_path / "bf16")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "bf16/metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.2
    ev = json.loads((tmp_path / "bf16/eval.json").read_text())
    assert ev["precision"] == "bf16"
    assert sum(ev["accuracy_by_length"].values()) / 3 > 0.8  # parity of <= 3 bits; chance is 0.5


def test_tf32_restores_the_global_flags():
    before = torch.backends.cuda.matmul.allow_tf32
    with precision_context("tf32", torch.device("cuda" if torch.cuda.is_available() else "cpu")):
        pass
    assert torch.backends.cuda.matmul.allow_tf32 == before
