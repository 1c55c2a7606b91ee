"""`lengen hf eval --device / --precision` (EvalSettings.device / .precision) on a tiny random
Llama: the CPU paths and the refusals (no GPU needed)."""

import csv
import json

import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from lengen.cli import main  # noqa: E402
from lengen.errors import LengenError  # noqa: E402

from tiny_llama import save_tiny_llama  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("hf"))


pytestmark = pytest.mark.usefixtures("private_cache")


def args(model_dir, out, *extra):
    return ["hf", "eval", str(model_dir / "model"), "--corpus", str(model_dir / "corpus"), "--docs", "1",
            "--methods", "rope", "yarn:factor=2", "--lengths", "32", "96", "--out", str(out), "--no-progress",
            *extra]


def ppl(out):
    with open(out / "results.csv", newline="") as f:
        return [float(r["ppl"]) for r in csv.DictReader(f)]


@pytest.mark.parametrize("spec", ["cuda", "cuda:3"])
def test_a_missing_gpu_is_one_line_exit_2_and_nothing_is_loaded_or_written(model_dir, tmp_path, capsys,
                                                                            monkeypatch, no_gpu, spec):
    monkeypatch.setattr("lengen.hf.evaluate.load", lambda *a, **k: pytest.fail("model loaded"))
    out = tmp_path / "out"
    assert main(args(model_dir, out, "--device", spec)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("lengen: error:")
    assert repr(spec) in err and "no CUDA GPU" in err
    assert not out.exists() and not (tmp_path / "cache").exists()


def test_device_cpu_equals_the_default_and_bf16_is_close(model_dir, tmp_path, no_gpu):
    assert main(args(model_dir, tmp_path / "default")) == 0
    assert main(args(model_dir, tmp_path / "cpu", "--device", "cpu")) == 0
    assert main(args(model_dir, tmp_path / "bf16", "--precision", "bf16")) == 0
    default, cpu, bf16 = ppl(tmp_path / "default"), ppl(tmp_path / "cpu"), ppl(tmp_path / "bf16")
    assert cpu == default and len(default) == 4
    assert bf16 != default and bf16 == pytest.approx(default, rel=0.02)  # autocast on, numbers close
    meta = json.loads((tmp_path / "bf16" / "results.json").read_text())["meta"]
    assert meta["device"] == "cpu" and meta["precision"] == "bf16" and meta["settings"]["precision"] == "bf16"


def test_bf16_runs_every_remapping_kernel_close_to_fp32(model_dir, tmp_path, no_gpu):
    """Under autocast the projections are bf16 but transformers' float32 rotary tables leave q and k
    float32: the methods' own attention (the fused CPU kernel with its log-sum-exp) took them
    mixed with a bf16 v and failed. Every remapping family, DPE's calibrated one included."""
    methods = ["self_extend:group=4,window=16", "rerope:window=16", "dca:chunk_size=32,local_size=8", "string",
               "dpe:scales=2-4,window=16"]

    def run(out, *extra):
        argv = args(model_dir, out, *extra)
        i = argv.index("--methods")
        argv[i + 1:i + 3] = methods
        assert main(argv) == 0
        return ppl(out)

    fp32, bf16 = run(tmp_path / "fp32"), run(tmp_path / "bf16", "--precision", "bf16")
    assert len(fp32) == 2 * len(methods)
    assert bf16 != fp32 and bf16 == pytest.approx(fp32, rel=0.02)


def test_rows_of_another_precision_are_not_reused(model_dir, tmp_path, capsys, no_gpu):
    out = tmp_path / "out"
    assert main(args(model_dir, out)) == 0
    capsys.readouterr()
    assert main(args(model_dir, out, "--precision", "bf16")) == 2
    assert "precision: 'fp32' there, 'bf16' now" in capsys.readouterr().err
    # results written before --precision existed were fp32: an fp32 run continues them, on any device
    result = json.loads((out / "results.json").read_text())
    del result["meta"]["settings"]["precision"]
    (out / "results.json").write_text(json.dumps(result))
    assert main(args(model_dir, out, "--device", "cpu", "--methods", "rope", "pi:factor=2")) == 0
    methods = [r["method"] for r in json.loads((out / "results.json").read_text())["rows"]]
    assert methods == ["rope", "rope", "pi:factor=2", "pi:factor=2", "yarn:factor=2", "yarn:factor=2"]


def test_bad_precision_is_refused_before_loading(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("lengen.hf.evaluate.load", lambda *a, **k: pytest.fail("model loaded"))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(args(model_dir, out, "--precision", "fp8"))
    assert e.value.code == 2 and "invalid choice: 'fp8'" in capsys.readouterr().err
    assert main(args(model_dir, out, "--precision", "bf16", "--dtype", "float16")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--precision bf16" in err and "float16" in err
    assert not out.exists()
    from lengen.hf.evaluate import run
    from lengen.hf.settings import EvalSettings

    with pytest.raises(LengenError, match="unknown precision 'half'"):
        run(EvalSettings(str(model_dir / "model"), ["rope"], [32], precision="half"), progress=False)
    with pytest.raises(LengenError, match="unknown device 'tpu'"):
        run(EvalSettings(str(model_dir / "model"), ["rope"], [32], device="tpu"), progress=False)
