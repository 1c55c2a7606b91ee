"""`lengen lm train` / `lengen lm eval`: --device and --precision (LMConfig.device / .precision,
LMEvalConfig.device / .precision). Without a GPU these check the CPU paths and the refusals; on a
GPU machine the rng test checks the CUDA generator state as well."""

import json

import pandas as pd
import pytest
import torch

import lengen.lm.train as train_mod
from lengen.cli import main
from lengen.devices import resolve_device
from lengen.errors import LengenError
from lengen.lm.config import LMConfig
from lengen.lm.evaluate import LMEvalConfig, evaluate_lm
from lengen.lm.train import train_lm
from tiny_lm import CORPUS, TINY
from guards import interrupt_on_call



pytestmark = pytest.mark.usefixtures("private_cache")


def train(out, *extra, steps=6):
    return main(["lm", "train", *TINY, "--steps", str(steps), "--out", str(out), *extra])


def ckpt(run):
    return torch.load(run / "checkpoint.pt", weights_only=False)


def metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def same_weights(a, b):
    return all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def without_seconds(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def test_device_cpu_gives_what_the_default_gives_on_the_cpu(tmp_path, no_gpu):
    assert train(tmp_path / "default") == 0
    assert train(tmp_path / "cpu", "--device", "cpu") == 0
    a, b = (tmp_path / "default"), (tmp_path / "cpu")
    record_a, record_b = (json.loads((d / "eval.json").read_text()) for d in (a, b))
    record_a.pop("train_seconds"), record_b.pop("train_seconds")  # wall time, not a result
    assert record_a == record_b
    assert same_weights(ckpt(a), ckpt(b))
    assert without_seconds(metrics(a)) == without_seconds(metrics(b))
    assert json.loads((b / "config.json").read_text())["device"] == "cpu"
    assert json.loads((a / "config.json").read_text())["device"] == "auto"


def test_checkpoint_holds_plain_numbers_and_the_rng_of_the_device_used(tmp_path):
    run = tmp_path / "run"
    assert train(run) == 0  # --device auto: the GPU on a GPU machine, else the CPU
    state = ckpt(run)
    assert set(state["rng"]) == {"numpy", "torch", "cuda"}
    assert isinstance(state["rng"]["torch"], torch.Tensor)
    if resolve_device("auto").type == "cuda":
        assert isinstance(state["rng"]["cuda"], torch.Tensor)
    else:
        assert state["rng"]["cuda"] is None
    # the loss window between metrics rows is stored as Python numbers, not device tensors
    assert type(state["loss_sum"]) is float and type(state["loss_count"]) is int
    assert "window" not in state


def test_a_run_resumes_on_another_device_spec_and_precision_to_the_same_weights(tmp_path, monkeypatch, no_gpu):
    """Neither device nor precision is part of the run's identity: a run started with --device cpu
    resumes with --device auto --precision tf32 (both the CPU's fp32 here) to the same weights."""
    assert train(tmp_path / "straight", "--device", "cpu") == 0
    with monkeypatch.context() as m:
        m.setattr(train_mod, "sample_windows", interrupt_on_call(train_mod.sample_windows, 5))
        assert train(tmp_path / "resumed", "--device", "cpu") == 130
    assert ckpt(tmp_path / "resumed")["step"] == 3
    assert train(tmp_path / "resumed", "--device", "auto", "--precision", "tf32") == 0
    a, b = ckpt(tmp_path / "straight"), ckpt(tmp_path / "resumed")
    assert b["step"] == 6 and same_weights(a, b)
    assert without_seconds(metrics(tmp_path / "straight")) == without_seconds(metrics(tmp_path / "resumed"))
    config = json.loads((tmp_path / "resumed" / "config.json").read_text())
    assert config["device"] == "auto" and config["precision"] == "tf32"  # the latest session's settings


def test_a_checkpoint_written_before_devices_still_resumes(tmp_path, monkeypatch, no_gpu):
    """Old checkpoints: rng {"numpy", "torch"} (no "cuda") and the window as a list of losses."""
    assert train(tmp_path / "straight") == 0
    with monkeypatch.context() as m:
        calls = []
        real = train_mod.sample_windows

        def interrupt_at_step_5(*a, **k):
            calls.append(1)
            if len(calls) == 5:
                raise KeyboardInterrupt
            return real(*a, **k)

        m.setattr(train_mod, "sample_windows", interrupt_at_step_5)
        assert train(tmp_path / "old") == 130
    state = ckpt(tmp_path / "old")
    assert state["step"] == 3 and state["loss_count"] == 1  # log every 2: step 3's loss is pending
    state["rng"] = {"numpy": state["rng"]["numpy"], "torch": state["rng"]["torch"]}
    state["window"] = [state.pop("loss_sum")]
    del state["loss_count"]
    torch.save(state, tmp_path / "old" / "checkpoint.pt")
    assert train(tmp_path / "old") == 0
    assert same_weights(ckpt(tmp_path / "straight"), ckpt(tmp_path / "old"))
    for x, y in zip(metrics(tmp_path / "straight"), metrics(tmp_path / "old")):
        assert x["step"] == y["step"] and x["loss"] == pytest.approx(y["loss"], rel=1e-12)


@pytest.mark.parametrize("spec", ["cuda", "cuda:1"])
def test_train_on_a_missing_gpu_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, no_gpu, monkeypatch, spec):
    monkeypatch.setattr(train_mod, "load_corpus", lambda *a, **k: pytest.fail("corpus loaded"))
    out = tmp_path / "run"
    assert train(out, "--device", spec) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("lengen: error:")
    assert repr(spec) in err and "no CUDA GPU" in err and "--device cpu" in err
    assert not out.exists() and not (tmp_path / "cache").exists()


def test_eval_on_a_missing_gpu_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    assert train(run) == 0
    before = sorted(p.name for p in run.iterdir())
    capsys.readouterr()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("lengen.lm.evaluate.load_run", lambda *a, **k: pytest.fail("model loaded"))
    assert main(["lm", "eval", str(run), "--device", "cuda", "--lengths", "16", "--docs", "1",
                 "--out", str(tmp_path / "ev"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'cuda'" in err and "no CUDA GPU" in err
    assert not (tmp_path / "ev").exists()
    assert main(["lm", "eval", str(run), "--device", "cuda:0", "--no-progress"]) == 2  # default --out
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert sorted(p.name for p in run.iterdir()) == before  # no eval-ppl folder


def test_bf16_trains_on_the_cpu_close_to_fp32(tmp_path):
    fast = ["--lr", "1e-2", "--device", "cpu"]
    assert train(tmp_path / "fp32", *fast, steps=16) == 0
    assert train(tmp_path / "bf16", *fast, "--precision", "bf16", steps=16) == 0
    rows = metrics(tmp_path / "bf16")
    assert len(rows) == 8 and rows[-1]["loss"] < rows[0]["loss"] - 0.5  # it learns
    ev32, ev16 = (json.loads((tmp_path / p / "eval.json").read_text()) for p in ("fp32", "bf16"))
    assert ev16["val_nll"] == pytest.approx(ev32["val_nll"], abs=0.05)
    # ... and bf16 was really used: the weights are close to fp32's, not equal
    a, b = ckpt(tmp_path / "fp32"), ckpt(tmp_path / "bf16")
    assert not same_weights(a, b)
    assert all(torch.allclose(a["model"][k], b["model"][k], atol=0.05) for k in a["model"])
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["precision"] == "bf16"


def test_unknown_precision_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        train(out, "--precision", "fp16")
    assert e.value.code == 2 and "invalid choice: 'fp16'" in capsys.readouterr().err
    assert not out.exists()
    # the Python API: LMConfig.validate, before anything is written
    cfg = LMConfig(corpus=CORPUS, steps=1, precision="fp8")
    with pytest.raises(LengenError, match="unknown precision 'fp8'"):
        train_lm(cfg, out, progress=False)
    assert not out.exists()
    with pytest.raises(LengenError, match="unknown device 'gpu'"):
        train_lm(LMConfig(corpus=CORPUS, steps=1, device="gpu"), out, progress=False)
    assert not out.exists()


def test_eval_device_and_precision(tmp_path, no_gpu):
    run = tmp_path / "run"
    assert train(run, "--lr", "1e-2", steps=16) == 0
    args = ["lm", "eval", str(run), "--methods", "rope,yarn:factor=2", "--lengths", "16,32", "--docs", "2",
            "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "default")]) == 0
    assert main([*args, "--out", str(tmp_path / "cpu"), "--device", "cpu"]) == 0
    assert main([*args, "--out", str(tmp_path / "bf16"), "--precision", "bf16"]) == 0
    default, cpu, bf16 = (pd.read_csv(tmp_path / d / "results.csv") for d in ("default", "cpu", "bf16"))
    pd.testing.assert_frame_equal(default, cpu)
    assert (bf16["ppl"] - default["ppl"]).abs().max() < 0.05 * default["ppl"].max()
    assert not bf16["ppl"].equals(default["ppl"])  # autocast was on
    meta = json.loads((tmp_path / "bf16" / "results.json").read_text())
    assert meta["device"] == "cpu" and meta["precision"] == "bf16"
    # what the numbers came from: the same record a run's eval.json keeps
    assert meta["environment"]["threads"] == torch.get_num_threads()
    assert meta["environment"]["torch"] == torch.__version__ and "lengen_commit" in meta["environment"]
    with pytest.raises(SystemExit):
        main([*args, "--precision", "int8"])
    # the Python API
    with pytest.raises(LengenError, match="unknown precision"):
        evaluate_lm(run, LMEvalConfig(lengths=[16], precision="fp16"), tmp_path / "api", progress=False)
    with pytest.raises(LengenError, match="no CUDA GPU"):
        evaluate_lm(run, LMEvalConfig(lengths=[16], device="cuda"), tmp_path / "api", progress=False)
    assert not (tmp_path / "api").exists()
    res = evaluate_lm(run, LMEvalConfig(methods=["rope"], lengths=[16], docs=2, device="cpu"), tmp_path / "api",
                      progress=False)
    assert res["rows"][0]["ppl"] == pytest.approx(float(default["ppl"][0]))


def test_eval_bf16_with_remapping_methods(tmp_path, no_gpu):
    """`lengen lm eval --precision bf16` with remapping methods (their own attention kernels, not
    autocast's SDPA): it runs, and stays close to fp32. (The LM's own rotation keeps q, k in the
    projections' dtype, so it did before lengen.hf's mixed-dtype fix too; this keeps it so.)"""
    run = tmp_path / "run"
    assert train(run, "--lr", "1e-2", steps=16) == 0
    args = ["lm", "eval", str(run), "--methods", "self_extend:group=2,window=8,rerope:window=8,dca",
            "--lengths", "16,32", "--docs", "2", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "fp32")]) == 0
    assert main([*args, "--out", str(tmp_path / "bf16"), "--precision", "bf16"]) == 0
    fp32, bf16 = (pd.read_csv(tmp_path / d / "results.csv") for d in ("fp32", "bf16"))
    assert len(fp32) == len(bf16) == 6
    assert (bf16["ppl"] - fp32["ppl"]).abs().max() < 0.05 * fp32["ppl"].max()
