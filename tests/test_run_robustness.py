"""A run directory under a newcomer's mistakes and a machine's accidents: damaged files, failed
starts, shorter --steps, reruns, kills between two writes, file modes, the cache folder."""

import json
import os

import pytest
import torch

from lengen import io
from lengen.cli import main
from lengen.che import loop

TINY = ["--task", "parity_check", "--steps", "12", "--batch-size", "8", "--train-length", "3", "--max-length",
        "5", "--eval-samples", "16", "--layers", "1", "--heads", "2", "--d-model", "8", "--d-ff", "16",
        "--checkpoint-every", "6", "--log-every", "3", "--no-progress", "--device", "cpu"]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lengen: error:") and "Traceback" not in err, err
    return err


@pytest.fixture
def run(tmp_path):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--out", str(out)]) == 0
    return out


def test_truncated_checkpoint_names_the_file_on_train_and_eval(run, capsys):
    data = (run / "checkpoint.pt").read_bytes()
    (run / "checkpoint.pt").write_bytes(data[: len(data) // 2])
    capsys.readouterr()
    assert main(["train", *TINY, "--out", str(run)]) == 2
    err = one_error_line(capsys)
    assert "checkpoint.pt is damaged" in err and "delete it" in err
    (run / "eval.json").unlink()
    assert main(["eval", str(run), "--no-progress"]) == 2
    assert "checkpoint.pt is damaged" in one_error_line(capsys)


def test_corrupt_metrics_and_config_name_the_file(run, capsys):
    # an old checkpoint without its own metrics rows reads metrics.jsonl on resume
    ckpt = torch.load(run / "checkpoint.pt", weights_only=False)
    ckpt.pop("metrics")
    ckpt["step"] = 6
    torch.save(ckpt, run / "checkpoint.pt")
    (run / "metrics.jsonl").write_text('{"step": 3, "loss": 0.7}\n{"step": 6, "lo')
    capsys.readouterr()
    assert main(["train", *TINY, "--out", str(run)]) == 2
    assert "metrics.jsonl is damaged (line 2" in one_error_line(capsys)
    (run / "config.json").write_text("{not json")
    assert main(["eval", str(run), "--no-progress"]) == 2
    assert "config.json is damaged" in one_error_line(capsys)
    assert main(["train", *TINY, "--out", str(run)]) == 2
    assert "config.json is damaged" in one_error_line(capsys)


def test_fewer_steps_than_the_checkpoint_is_refused_and_nothing_changes(run, capsys):
    before = (run / "config.json").read_text(), (run / "eval.json").read_text()
    capsys.readouterr()
    assert main(["train", *TINY, "--steps", "5", "--out", str(run)]) == 2
    assert "already trained to step 12" in one_error_line(capsys)
    assert ((run / "config.json").read_text(), (run / "eval.json").read_text()) == before


def test_a_folder_with_no_checkpoint_is_reused_by_the_corrected_command(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    # what a start that failed before its first checkpoint leaves behind
    io.write_json(out / "config.json", {"task": "parity_check", "seed": 99})
    (out / "metrics.jsonl").write_text('{"step": 3}\n')
    assert main(["train", *TINY, "--out", str(out)]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["seed"] == 0 and cfg["steps"] == 12
    assert [json.loads(r)["step"] for r in (out / "metrics.jsonl").read_text().splitlines()] == [3, 6, 9, 12]


def test_rerunning_a_finished_run_reuses_its_evaluation(run, monkeypatch):
    before = (run / "eval.json").read_bytes()

    def no_eval(*a, **k):
        raise AssertionError("a finished run was evaluated again")

    monkeypatch.setattr(loop, "evaluate_lengths", no_eval)
    assert main(["train", *TINY, "--out", str(run)]) == 0
    assert (run / "eval.json").read_bytes() == before
    # another evaluation setting is a new evaluation
    with pytest.raises(AssertionError, match="evaluated again"):
        main(["train", *TINY, "--eval-samples", "8", "--out", str(run)])


@pytest.mark.parametrize("rows_at_kill", [2, 4])  # at the step-6 and at the final checkpoint
def test_a_kill_between_checkpoint_and_metrics_loses_no_row(tmp_path, monkeypatch, rows_at_kill):
    ref = tmp_path / "ref"
    assert main(["train", *TINY, "--out", str(ref)]) == 0
    out = tmp_path / "killed"
    real = io.write_text

    def die_between_the_writes(path, text):
        if path.name == "metrics.jsonl" and text.count("\n") == rows_at_kill:
            raise KeyboardInterrupt  # the process dies here: checkpoint written, metrics not
        return real(path, text)

    monkeypatch.setattr(io, "write_text", die_between_the_writes)
    with pytest.raises(KeyboardInterrupt):
        loop.train(loop.TrainConfig.from_dict(json.loads((ref / "config.json").read_text())), out, progress=False)
    monkeypatch.setattr(io, "write_text", real)
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 3 * rows_at_kill
    assert main(["train", *TINY, "--out", str(out)]) == 0

    def rows(path):
        return [{k: v for k, v in json.loads(r).items() if k != "seconds"} for r in path.read_text().splitlines()]

    assert rows(out / "metrics.jsonl") == rows(ref / "metrics.jsonl")


def test_seconds_keep_counting_after_a_resume(tmp_path):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--steps", "6", "--out", str(out)]) == 0
    assert main(["train", *TINY, "--steps", "12", "--out", str(out)]) == 0
    seconds = [json.loads(r)["seconds"] for r in (out / "metrics.jsonl").read_text().splitlines()]
    assert seconds == sorted(seconds) and seconds[2] > 0 and seconds[-1] >= seconds[1]


def test_run_files_get_the_umask_mode(run):
    mask = os.umask(0)
    os.umask(mask)
    for name in ("config.json", "checkpoint.pt", "metrics.jsonl", "eval.json", "accuracy.png"):
        assert (run / name).stat().st_mode & 0o777 == 0o666 & ~mask, name


def test_one_cache_variable_for_corpus_and_kernel(tmp_path, monkeypatch):
    from lengen.data.cache import cache_dir
    from lengen.kernels.small_attention import build_dir

    monkeypatch.setenv("LENGEN_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    assert build_dir().parent == tmp_path / "c" / "kernels"


def test_the_other_kind_of_run_is_named(run, tmp_path, capsys):
    from lengen.lm.config import LMConfig

    lm_run = tmp_path / "lm"
    io.write_json(lm_run / "config.json", LMConfig().to_dict())
    capsys.readouterr()
    assert main(["eval", str(lm_run), "--no-progress"]) == 2
    assert "this is a language-model run: use `lengen lm eval`" in one_error_line(capsys)
    assert main(["lm", "eval", str(run), "--no-progress"]) == 2
    assert "this is a CHE run: use `lengen eval`" in one_error_line(capsys)


@pytest.mark.parametrize("command", [["eval"], ["lm", "eval"], ["mlm", "eval"]])
def test_an_arithmetic_run_is_named_by_the_other_evals(tmp_path, capsys, command):
    from lengen.arith.config import ArithConfig

    arith_run = tmp_path / "arith"   # it has `task` too: it must not be taken for a CHE run
    io.write_json(arith_run / "config.json", ArithConfig().to_dict())
    capsys.readouterr()
    assert main([*command, str(arith_run), "--no-progress"]) == 2
    assert "this is an arithmetic run: use `lengen arith eval`" in one_error_line(capsys)


def test_tasks_explains_its_symbols(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "| is the terminator token" in out and "† permutation-invariant" in out
    assert "bucket_sort †" in out and "reverse_string †" not in out


def test_a_run_saved_with_the_old_model_key_still_resumes_and_evaluates(run, capsys):
    """ModelConfig.train_length (before it became train_tokens) in an older config.json."""
    cfg = json.loads((run / "config.json").read_text())
    cfg["model"]["train_length"] = cfg["model"].pop("train_tokens")
    (run / "config.json").write_text(json.dumps(cfg))
    (run / "eval.json").unlink()
    assert main(["train", *TINY, "--steps", "18", "--out", str(run)]) == 0  # resumes 12 -> 18
    assert json.loads((run / "eval.json").read_text())["steps"] == 18
    assert main(["eval", str(run), "--no-progress", "--max-length", "6"]) == 0
