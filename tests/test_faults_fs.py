"""File-system faults and non-finite numbers: a read-only folder, an --out under a regular file, a
full disk, `--lr nan`. Each ends in one line `lengen: error: ...` naming the path or the option,
exit status 2, no traceback, nothing created or overwritten, and (where there is work to do) the
refusal comes before it.

The tests run as root, which writes through chmod 555; a read-only tmpfs mount stops root too.
Where mounting is not allowed they are skipped (failed under CI)."""

import json
import math
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lengen import io
from lengen.cli import main
from lengen.errors import LengenError
from tiny_lm import TINY as LM_TINY

TINY = ["--task", "parity_check", "--steps", "4", "--batch-size", "8", "--train-length", "3", "--max-length",
        "5", "--eval-samples", "8", "--layers", "1", "--heads", "2", "--d-model", "8", "--d-ff", "16",
        "--checkpoint-every", "2", "--log-every", "2", "--no-progress", "--device", "cpu"]


# -- helpers ------------------------------------------------------------------------------------

def one_error_line(capsys, *names) -> str:
    """The one stderr line of a refusal; every one of `names` (paths, options) appears in it."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lengen: error:") and "Traceback" not in err, err
    for name in names:
        assert str(name) in err, (name, err)
    return err


def snapshot(folder: Path) -> dict:
    """Every file under `folder` (hidden ones too) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def no_work(monkeypatch, target: str) -> None:
    """`target` (module.attribute, the expensive step) fails the test if it is called."""
    def work(*args, **kwargs):
        pytest.fail(f"{target} ran before the refusal")

    original = pkgutil.resolve_name(target)
    monkeypatch.setattr(target, work)
    # a command's handler that imported the name holds its own reference: replace that one too
    attr = target.rsplit(".", 1)[1]
    for name, module in list(sys.modules.items()):
        if name.startswith("lengen.") and getattr(module, attr, None) is original:
            monkeypatch.setattr(module, attr, work)


def _mount(target: Path, options: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True,
                       text=True)
    if r.returncode:
        why = f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}): needs root in a sandbox that allows it"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture
def mounts():
    """mount(path, options, holding=None): a tmpfs at `path` (with a copy of the folder `holding`,
    then remounted with `options`); unmounted after the test."""
    done = []

    def mount(path: Path, options: str, holding: Path | None = None) -> Path:
        _mount(path, "rw" if holding else options)
        done.append(path)
        if holding is not None:
            shutil.copytree(holding, path, dirs_exist_ok=True)
            subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True)
        return path

    yield mount
    for path in reversed(done):
        if subprocess.run(["umount", str(path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def ro(tmp_path, mounts) -> Path:
    """An empty read-only folder (root cannot write there either)."""
    return mounts(tmp_path / "ro", "ro")


@pytest.fixture
def a_file(tmp_path) -> Path:
    f = tmp_path / "notes.txt"
    f.write_text("not a folder\n")
    return f


@pytest.fixture(scope="module")
def che_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("che") / "run"
    assert main(["train", *TINY, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def corpus_runs(tmp_path_factory) -> dict:
    """A tiny `lengen lm train` run and a tiny `lengen mlm train` run."""
    root = tmp_path_factory.mktemp("corpus")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LENGEN_CACHE", str(root / "cache"))
        for kind in ("lm", "mlm"):
            assert main([kind, "train", *LM_TINY, "--steps", "2", "--device", "cpu", "--out",
                         str(root / kind)]) == 0
    return {"lm": root / "lm", "mlm": root / "mlm"}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sweep")
    spec = root / "s.yaml"
    fixed = {"steps": 4, "batch_size": 8, "train_length": 3, "max_length": 5, "eval_samples": 8, "layers": 1,
             "heads": 2, "d_model": 8, "d_ff": 16, "checkpoint_every": 2, "log_every": 2}
    spec.write_text(yaml.safe_dump({"name": "tiny", "grid": {"task": ["parity_check"], "pe": ["rope"]},
                                    "fixed": fixed}))
    assert main(["sweep", "run", str(spec), "--out", str(root / "sweep"), "--workers", "1", "--device", "cpu",
                 "--no-progress"]) == 0
    return root / "sweep"


# -- the check itself -----------------------------------------------------------------------------

def test_check_writable_creates_nothing_and_refuses_files_and_read_only_places(tmp_path, ro, a_file):
    io.check_writable(tmp_path / "new" / "deeper")           # a folder still to be created: fine
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "ro"]  # not created, no probe file left
    for folder, says in [(a_file, f"{a_file} is a file, not a folder"),
                         (a_file / "run", f"cannot write to {a_file / 'run'}: {a_file} is a file"),
                         (ro, f"cannot write to {ro}: Read-only file system"),
                         (ro / "a" / "b", f"cannot write to {ro / 'a' / 'b'} (it would be created in {ro})")]:
        with pytest.raises(LengenError, match="choose another --out") as e:
            io.check_writable(folder)
        assert says in str(e.value)
    assert os.listdir(ro) == [] and a_file.read_text() == "not a folder\n"


# -- training commands: --out that cannot be written ----------------------------------------------

@pytest.mark.parametrize("where", ["under_ro", "ro", "file", "under_file"])
def test_train_into_an_unwritable_out_is_refused_before_training(where, ro, a_file, monkeypatch, capsys):
    out = {"under_ro": ro / "run", "ro": ro, "file": a_file, "under_file": a_file / "run"}[where]
    no_work(monkeypatch, "lengen.che.loop.train")
    assert main(["train", *TINY, "--out", str(out)]) == 2
    one_error_line(capsys, out, "choose another --out")
    assert os.listdir(ro) == [] and a_file.read_text() == "not a folder\n"


@pytest.mark.parametrize("kind,work", [("lm", "lengen.lm.train.train_lm"), ("mlm", "lengen.mlm.train.train_mlm")])
def test_lm_and_mlm_train_into_an_unwritable_out_are_refused_before_training(kind, work, ro, a_file, monkeypatch,
                                                                            capsys):
    no_work(monkeypatch, work)
    for out in (ro / "run", a_file / "run"):
        assert main([kind, "train", *LM_TINY, "--out", str(out)]) == 2
        one_error_line(capsys, out)
    assert os.listdir(ro) == [] and a_file.read_text() == "not a folder\n"


def test_demo_into_a_read_only_folder_is_refused_before_training(ro, monkeypatch, capsys):
    no_work(monkeypatch, "lengen.che.loop.train")
    assert main(["demo", "--out", str(ro / "demo"), "--steps", "2", "--no-progress"]) == 2
    one_error_line(capsys, ro / "demo")


# -- evaluation commands on a read-only run: refused before the model is loaded ---------------------

def test_eval_of_a_read_only_run_is_refused_before_evaluating(che_run, tmp_path, mounts, monkeypatch, capsys):
    run = mounts(tmp_path / "ro", "ro", holding=che_run)
    before = snapshot(run)
    no_work(monkeypatch, "lengen.che.loop.evaluate_run")
    assert main(["eval", str(run), "--max-length", "6", "--no-progress"]) == 2
    one_error_line(capsys, run, "Read-only file system", "writable")
    assert snapshot(run) == before


def test_inspect_refuses_an_unwritable_out_before_loading(che_run, tmp_path, mounts, a_file, monkeypatch, capsys):
    run = mounts(tmp_path / "ro", "ro", holding=che_run)
    no_work(monkeypatch, "lengen.inspect.open_run")
    assert main(["inspect", str(run)]) == 2                          # default --out: the run itself
    one_error_line(capsys, run, "Read-only file system")
    for out in (run / "figs", a_file, a_file / "figs"):
        assert main(["inspect", str(che_run), "--out", str(out)]) == 2
        one_error_line(capsys, out, "choose another --out")
    assert a_file.read_text() == "not a folder\n"
    # a folder that is no run is still told so (not that it cannot be written)
    monkeypatch.undo()
    assert main(["inspect", str(run / "nothing")]) == 2
    one_error_line(capsys, "not a lengen run directory")


@pytest.mark.parametrize("kind,extra", [("lm", ["--lengths", "16"]), ("mlm", ["--lengths", "16"])])
def test_lm_and_mlm_eval_of_a_read_only_run_are_refused_before_loading(kind, extra, corpus_runs, tmp_path, mounts,
                                                                       monkeypatch, capsys):
    run = mounts(tmp_path / "ro", "ro", holding=corpus_runs[kind])
    no_work(monkeypatch, f"lengen.{kind}.evaluate.load_run")
    assert main([kind, "eval", str(run), *extra, "--no-progress"]) == 2    # default --out: inside the run
    one_error_line(capsys, run, "Read-only file system")
    assert main([kind, "eval", str(corpus_runs[kind]), *extra, "--out", str(run / "x"), "--no-progress"]) == 2
    one_error_line(capsys, run / "x")


def test_hf_eval_into_a_read_only_out_is_refused_before_loading(tmp_path, ro, monkeypatch, capsys):
    (tmp_path / "model").mkdir()  # the folder checks pass; loading it would fail, but must not start
    (tmp_path / "model" / "config.json").write_text('{"model_type": "llama", "max_position_embeddings": 64}')
    no_work(monkeypatch, "lengen.hf.evaluate.run")
    assert main(["hf", "eval", str(tmp_path / "model"), "--lengths", "64", "--out", str(ro / "hf"),
                 "--no-progress"]) == 2
    one_error_line(capsys, ro / "hf")


def test_report_of_a_read_only_sweep_is_refused_before_reading_runs(sweep, tmp_path, mounts, a_file, monkeypatch,
                                                                    capsys):
    ro_sweep = mounts(tmp_path / "ro", "ro", holding=sweep)
    no_work(monkeypatch, "lengen.reports.build_report")
    assert main(["report", str(ro_sweep)]) == 2              # default --out: SWEEP/report
    one_error_line(capsys, ro_sweep / "report", "give --out a writable folder")
    assert main(["report", str(sweep), "--out", str(a_file / "r")]) == 2
    one_error_line(capsys, a_file / "r", "choose another --out")
    assert main(["report", str(sweep), "--out", str(ro_sweep / "r")]) == 2
    one_error_line(capsys, ro_sweep / "r")


# -- a full disk: the last net at the top level ---------------------------------------------------

def test_a_disk_that_fills_up_mid_run_ends_in_one_line_and_no_half_written_file(tmp_path, mounts, capsys):
    full = mounts(tmp_path / "full", "size=64k")
    out = full / "run"
    big = ["--layers", "2", "--d-model", "64", "--d-ff", "256"]  # a checkpoint (with Adam's state) > 64k
    assert main(["train", *TINY, *big, "--out", str(out)]) == 2
    err = one_error_line(capsys, out / "checkpoint.pt", "No space left on device", "rerun")
    assert "RuntimeError" not in err
    names = os.listdir(out)
    assert not [n for n in names if n.endswith(".tmp")], names        # the temporary file is gone
    assert "checkpoint.pt" not in names
    json.loads((out / "config.json").read_text())                     # what was written is whole


def test_an_os_error_escaping_a_command_is_one_line_naming_the_path(monkeypatch, capsys):
    def denied(args):
        raise PermissionError(13, "Permission denied", "/srv/shared/runs")

    monkeypatch.setattr("lengen.cli.tasks.run", denied)  # main looks the handler up after parsing
    assert main(["tasks"]) == 2
    one_error_line(capsys, "/srv/shared/runs: Permission denied", "--out")


# -- non-finite numbers -----------------------------------------------------------------------------

@pytest.mark.parametrize("args,says", [
    (["--lr", "nan"], "--lr must be a finite number, got nan"),
    (["--lr", "inf"], "--lr must be a finite number, got inf"),
    (["--lr", "1e999"], "--lr must be a finite number, got inf"),
    (["--grad-clip", "inf"], "--grad-clip must be a finite number, got inf"),
    (["--dropout=-inf"], "--dropout must be a finite number, got -inf"),
    (["--pe-option", "base=nan"], "--pe-option base must be a finite number, got nan"),
    (["--pe-option", "base=1e999"], "--pe-option base must be a finite number"),
    (["--positions", "randomized", "--position-option", "max_position=inf"], "--position-option max_position"),
])
def test_train_refuses_non_finite_numbers_before_training(args, says, tmp_path, monkeypatch, capsys):
    no_work(monkeypatch, "lengen.che.loop.train")
    assert main(["train", *TINY, *args, "--out", str(tmp_path / "run")]) == 2
    one_error_line(capsys, says)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("cmd,work", [
    (["lm", "train", *LM_TINY, "--lr", "nan"], "lengen.lm.train.train_lm"),
    (["lm", "train", *LM_TINY, "--weight-decay", "inf"], "lengen.lm.train.train_lm"),
    (["mlm", "train", *LM_TINY, "--mask-rate", "nan"], "lengen.mlm.train.train_mlm"),
    (["mlm", "train", *LM_TINY, "--val-fraction", "inf"], "lengen.mlm.train.train_mlm"),
    (["demo", "--lr", "inf", "--no-progress"], "lengen.che.loop.train"),
])
def test_other_commands_refuse_non_finite_flags(cmd, work, tmp_path, monkeypatch, capsys):
    no_work(monkeypatch, work)
    flag = next(a for a in cmd if a.startswith("--") and a not in LM_TINY and a != "--no-progress")
    assert main([*cmd, "--out", str(tmp_path / "out")]) == 2
    one_error_line(capsys, f"{flag} must be a finite number")
    assert not (tmp_path / "out").exists()


def test_method_options_must_be_finite(corpus_runs, monkeypatch, capsys):
    no_work(monkeypatch, "lengen.lm.evaluate.load_run")
    assert main(["lm", "eval", str(corpus_runs["lm"]), "--methods", "pi:factor=nan", "--lengths", "16",
                 "--no-progress"]) == 2
    one_error_line(capsys, "option factor in spec 'pi:factor=nan' must be a finite number")
    assert not (corpus_runs["lm"] / "eval-ppl").exists()


def test_configs_refuse_non_finite_numbers_whatever_built_them():
    """The check sits in the configs' validate(): sweep files, presets and saved configs get it too."""
    from lengen.lm.config import LMConfig
    from lengen.mlm.config import MLMConfig
    from lengen.models.config import ModelConfig
    from lengen.che.options import config_from_options

    nan, inf = math.nan, math.inf
    cases = [
        (config_from_options({"lr": nan}), "lr must be a finite number, got nan"),
        (config_from_options({"lr": "inf"}), "lr must be a finite number, got inf"),   # YAML 1.1 text
        (config_from_options({"grad_clip": inf}), "grad-clip must be a finite number"),
        (config_from_options({"pe_options": {"base": inf}}), "pe-option base must be a finite number"),
        (config_from_options({"position_options": {"x": [1.0, nan]}}), "position-option x must be"),
        (LMConfig(weight_decay=nan), "weight-decay must be a finite number"),
        (LMConfig(model=ModelConfig(causal=True, dropout=nan)), "dropout must be a finite number"),
        (MLMConfig(position_options={"test_length": "inf"}), "position-option test_length must be"),
        (MLMConfig(mask_rate=-inf), "mask-rate must be a finite number"),
    ]
    for cfg, says in cases:
        with pytest.raises(LengenError) as e:
            cfg.validate()
        assert says in str(e.value), (cfg, e.value)
    config_from_options({"lr": 1e-3, "pe_options": {"base": 500}}).validate()  # finite numbers pass


# -- sweeps -------------------------------------------------------------------------------------

def sweep_file(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    fixed = {"task": "parity_check", "steps": 4, "batch_size": 8, "train_length": 3, "max_length": 5,
             "eval_samples": 8, "layers": 1, "heads": 2, "d_model": 8, "d_ff": 16, "checkpoint_every": 2,
             "log_every": 2}
    path.write_text(yaml.safe_dump({"name": "t", "grid": {"seed": [0, 1]}, "fixed": fixed}))
    return path


SWEEP = ["--no-progress", "--workers", "1", "--device", "cpu"]


def test_sweep_run_into_a_read_only_folder_or_under_a_file(tmp_path, ro, a_file, capsys, monkeypatch):
    spec = sweep_file(tmp_path)
    no_work(monkeypatch, "lengen.sweeps.runner.SweepDir.write_index")
    assert main(["sweep", "run", str(spec), "--out", str(ro / "sweep"), *SWEEP]) == 2
    one_error_line(capsys, ro / "sweep", "Read-only file system")
    assert main(["sweep", "run", str(spec), "--out", str(a_file / "sweep"), *SWEEP]) == 2
    one_error_line(capsys, a_file, "is a file, not a folder")
    assert a_file.read_text() == "not a folder\n"


def test_a_finished_sweep_on_a_read_only_disk_is_refused_untouched_and_still_readable(tmp_path, mounts,
                                                                                        capsys):
    spec, done = sweep_file(tmp_path), tmp_path / "done"
    assert main(["sweep", "run", str(spec), "--out", str(done), *SWEEP]) == 0
    ro = mounts(tmp_path / "ro", "ro", holding=done)
    before = snapshot(ro)
    capsys.readouterr()
    assert main(["sweep", "run", str(spec), "--out", str(ro), *SWEEP]) == 2
    one_error_line(capsys, ro, "Read-only file system", "lengen sweep status")
    assert main(["sweep", "status", str(ro)]) == 0 and "2 done" in capsys.readouterr().out
    assert snapshot(ro) == before
