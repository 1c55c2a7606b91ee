"""Results folders on a rerun (issue 49): every results file of a CHE, sweep, LM, MLM and arith
folder truncated, corrupted (whole JSON that is not a record) or swapped for another run's copy,
then the same command again. Each case ends either in the rebuilt result, equal to the
uninterrupted one (nothing lost, nothing relabelled), with the damaged file named; or in one line,
exit 2, the file untouched."""

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from lengen import io
from lengen.arith import evaluate as arith_evaluate
from lengen.cli import main
from lengen.sweeps import SweepOptions, load_spec, run_sweep
from tiny_lm import CORPUS

TIMING = {"seconds", "train_seconds", "eval_seconds"}
#: record fields that differ between two evaluations of the same checkpoint (when, where, how fast)
VOLATILE = TIMING | {"environment"}

CHE = {"task": "parity_check", "steps": 10, "batch_size": 8, "train_length": 3, "max_length": 5, "eval_samples": 8,
       "layers": 1, "heads": 2, "d_model": 8, "d_ff": 16, "checkpoint_every": 5, "log_every": 5}
CORPUS_LM = {"corpus": CORPUS, "train_length": 16, "layers": 1, "heads": 2, "d_model": 16, "d_ff": 32,
             "batch_size": 4, "warmup": 2, "steps": 4, "checkpoint_every": 2, "log_every": 2, "val_windows": 4}
ARITH = {"layers": 1, "heads": 2, "d_model": 16, "d_ff": 32, "batch_size": 8, "warmup": 2, "steps": 6,
         "train_digits": 1, "test_digits": 2, "eval_samples": 4, "log_every": 3, "checkpoint_every": 3}
#: per sweep kind: the sweep file's top level, the long table
SWEEPS = {
    "train": ({"fixed": CHE}, "accuracy_by_length.csv"),
    "lm": ({"command": "lm", "fixed": CORPUS_LM, "eval": {"lengths": [16, 32], "methods": ["rope"], "docs": 2}},
           "ppl_by_length.csv"),
    "mlm": ({"command": "mlm", "fixed": CORPUS_LM, "eval": {"lengths": [16, 32], "windows": 2, "log_n": "off"}},
            "mlm_by_length.csv"),
    "arith": ({"command": "arith", "fixed": ARITH}, "arith_by_cell.csv"),
}


def flags(options: dict) -> list[str]:
    return [a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lengen: error:") and "Traceback" not in err, err
    return err


def read_csv(path: Path) -> list[dict]:
    with open(path) as f:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(f)]


def record(path: Path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in VOLATILE}


def truncate(path: Path, other: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def corrupt(path: Path, other: Path) -> None:
    path.write_text('{"rows": "not a record"}\n')  # whole JSON, not what the file holds


def foreign(path: Path, other: Path) -> None:
    shutil.copyfile(other, path)  # the same file of a run that differs only in its seed


FAULTS = {"truncated": truncate, "corrupt": corrupt, "foreign": foreign}


# -- sweeps: a damaged run is named, counted as damaged, evaluated again ---------------------------

@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """kind -> (sweep file, the finished uninterrupted sweep folder): two runs each, seeds 0 and 1."""
    root = tmp_path_factory.mktemp("sweeps")
    made = {}
    for kind, (top, _) in SWEEPS.items():
        spec = root / f"{kind}.yaml"
        spec.write_text(yaml.safe_dump({"name": kind, "grid": {"seed": [0, 1]}, **top}, sort_keys=False))
        counts = run_sweep(load_spec(spec), root / kind, SweepOptions(device="cpu", workers=1, threads=1,
                                                                      progress=False))
        assert counts["done"] == 2 and counts["results"] == 2
        made[kind] = spec, root / kind
    return made


def done_files(folder: Path, kind: str) -> list[str]:
    """A run's results files a rerun reads back: the done file, and an LM's training record."""
    spec = load_spec(folder / "sweep.yaml")
    done = spec.kind.done_file(spec.evaluation)
    return [done] if done == "eval.json" else [done, "eval.json"]


CASES = [(kind, index, fault) for kind in SWEEPS for index in (0, 1) for fault in FAULTS
         if index == 0 or kind in ("lm", "mlm")]   # index 1: an LM's training record


@pytest.mark.parametrize("kind, index, fault", CASES)
def test_a_damaged_sweep_run_is_named_and_evaluated_again_to_the_uninterrupted_tables(
        sweeps, tmp_path, capsys, kind, index, fault):
    spec, ref = sweeps[kind]
    out = tmp_path / kind
    shutil.copytree(ref, out)
    runs = sorted(p for p in (out / "runs").iterdir())
    name = done_files(out, kind)[index]
    FAULTS[fault](runs[0] / name, runs[1] / name)
    damaged = str(runs[0] / name)
    capsys.readouterr()

    assert main(["sweep", "status", str(out)]) == 0
    said = capsys.readouterr().out
    assert "1 done, 1 damaged" in said and damaged in said, said

    assert main(["sweep", "run", str(spec), "--out", str(out), "--device", "cpu", "--workers", "1",
                 "--no-progress"]) == 0
    said = capsys.readouterr().out
    assert "1 done, 1 to run" in said and f"run {runs[0].name}: {damaged} is" in said, said
    assert "evaluated again from its checkpoint" in said
    long_table = SWEEPS[kind][1]
    for table in ("results.csv", long_table):
        assert read_csv(out / table) == read_csv(ref / table), table
    assert record(runs[0] / name) == record(ref / "runs" / runs[0].name / name)
    # not trained again: the rerun resumed from the final checkpoint, the training rows are the same
    log = (out / "logs" / f"{runs[0].name}.log").read_text()
    assert log.count("] start on") == 1 and log.count("] resume on") == 1, log
    assert (runs[0] / "metrics.jsonl").read_bytes() == (ref / "runs" / runs[0].name / "metrics.jsonl").read_bytes()


def test_a_sweep_run_holding_another_runs_config_and_results_is_named_and_refused_untouched(sweeps, tmp_path, capsys):
    spec, ref = sweeps["train"]
    out = tmp_path / "che"
    shutil.copytree(ref, out)
    first, second = sorted((out / "runs").iterdir())
    seeds = [json.loads((run / "config.json").read_text())["seed"] for run in (first, second)]
    for name in ("config.json", "eval.json"):   # a consistent pair: only the sweep's own config tells
        shutil.copyfile(second / name, first / name)
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    capsys.readouterr()
    assert main(["sweep", "status", str(out)]) == 0
    assert f"{first / 'config.json'} is another run's (its settings digest differs)" in capsys.readouterr().out
    # the run's checkpoint is not this config's: a failure naming the folder, the other run kept
    assert main(["sweep", "run", str(spec), "--out", str(out), "--device", "cpu", "--workers", "1",
                 "--no-progress"]) == 1
    said = capsys.readouterr().out
    assert f"run {first.name} failed" in said and f"holds another config (seed: {seeds[1]} -> {seeds[0]})" in said, said
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert [r["run_id"] for r in read_csv(out / "results.csv")] == [second.name]


def test_status_report_and_export_count_a_damaged_run_alike_and_name_it(sweeps, tmp_path, capsys):
    spec, ref = sweeps["train"]
    out = tmp_path / "che"
    shutil.copytree(ref, out)
    first = sorted((out / "runs").iterdir())[0]
    truncate(first / "eval.json", None)
    capsys.readouterr()
    assert main(["sweep", "status", str(out)]) == 0
    status = capsys.readouterr().out
    assert "2 runs: 1 done, 1 damaged" in status
    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 0
    report = capsys.readouterr().out
    assert "1 of 2 runs finished" in report
    assert f"not counted: run {first.name}: {first / 'eval.json'} is damaged" in report, report
    assert main(["sweep", "export", str(out), "--out", str(tmp_path / "export")]) == 0
    said = capsys.readouterr().out
    assert "1 of 2 runs finished" in said and f"not exported: run {first.name}: {first / 'eval.json'} is damaged" in said


def test_a_damaged_results_table_is_rebuilt_from_the_runs(sweeps, tmp_path, capsys):
    spec, ref = sweeps["train"]
    out = tmp_path / "che"
    shutil.copytree(ref, out)
    whole = (out / "results.csv").read_bytes()
    (out / "results.csv").write_bytes(whole[: len(whole) // 2])
    (out / "accuracy_by_length.csv").write_text("run_id,length,accuracy\nnot,a,row\n")
    assert main(["sweep", "run", str(spec), "--out", str(out), "--device", "cpu", "--workers", "1",
                 "--no-progress"]) == 0
    assert "2 done, 0 to run" in capsys.readouterr().out
    assert (out / "results.csv").read_bytes() == whole
    assert (out / "accuracy_by_length.csv").read_bytes() == (ref / "accuracy_by_length.csv").read_bytes()


@pytest.mark.parametrize("fault", ["truncated", "dropped", "row"])
def test_a_damaged_export_table_is_named_and_nothing_is_reused_or_written(sweeps, tmp_path, capsys, fault):
    """An export accumulates (its rows of runs the sweep folder lacks are kept): a damaged table of
    it would be carried on, cut short, so an export into it and its report are refused."""
    _, ref = sweeps["train"]
    export = tmp_path / "export"
    assert main(["sweep", "export", str(ref), "--out", str(export)]) == 0
    table = export / "results.csv"
    if fault == "truncated":
        truncate(table, None)
    elif fault == "dropped":   # cut at a line break: every row whole, one missing
        table.write_text("".join(table.read_text().splitlines(keepends=True)[:-1]))
    else:   # an export from before row counts, every line whole but one row cut short
        marker = json.loads((export / "export.json").read_text())
        del marker["rows"]
        (export / "export.json").write_text(json.dumps(marker))
        lines = table.read_text().splitlines()
        table.write_text("\n".join([*lines[:-1], lines[-1].rsplit(",", 3)[0]]) + "\n")
    before = {p.name: p.read_bytes() for p in export.iterdir()}
    capsys.readouterr()
    assert main(["sweep", "export", str(ref), "--out", str(export)]) == 2
    assert f"{table} is damaged" in one_error_line(capsys)
    assert main(["report", str(export), "--out", str(tmp_path / "report")]) == 2
    assert f"{table} is damaged" in one_error_line(capsys)
    assert {p.name: p.read_bytes() for p in export.iterdir()} == before and not (tmp_path / "report").exists()


# -- run folders: a rerun of the training command ------------------------------------------------

#: kind -> (the training command's arguments, less --out and --seed)
RUNS = {
    "che": ["train", *flags(CHE), "--no-progress", "--device", "cpu"],
    "lm": ["lm", "train", *flags({k: v for k, v in CORPUS_LM.items()}), "--no-progress", "--device", "cpu"],
    "mlm": ["mlm", "train", *flags({k: v for k, v in CORPUS_LM.items()}), "--no-progress", "--device", "cpu"],
    "arith": ["arith", "train", *flags(ARITH), "--no-progress", "--device", "cpu"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """kind -> (the finished run with seed 0, the same run with seed 1)."""
    root = tmp_path_factory.mktemp("runs")
    made = {}
    for kind, argv in RUNS.items():
        for seed in (0, 1):
            assert main([*argv, "--seed", str(seed), "--out", str(root / f"{kind}-{seed}")]) == 0
        made[kind] = root / f"{kind}-0", root / f"{kind}-1"
    return made


RUN_CASES = [(kind, name, fault) for kind in RUNS for name in ("eval.json", "metrics.jsonl") for fault in FAULTS]


@pytest.mark.parametrize("kind, name, fault", RUN_CASES)
def test_a_rerun_rebuilds_a_damaged_results_file_of_a_finished_run(runs, tmp_path, capsys, kind, name, fault):
    ref, other = runs[kind]
    out = tmp_path / "run"
    shutil.copytree(ref, out)
    if name == "metrics.jsonl" and fault == "corrupt":
        (out / name).write_text('{"step": 99, "loss": 0.0}\n')  # whole JSON lines, not this run's rows
    else:
        FAULTS[fault](out / name, other / name)
    capsys.readouterr()
    assert main([*RUNS[kind], "--seed", "0", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert record(out / "eval.json") == record(ref / "eval.json")
    assert (out / "metrics.jsonl").read_bytes() == (ref / "metrics.jsonl").read_bytes()  # the checkpoint's rows
    if name == "eval.json":  # named; the metrics rows are the checkpoint's, never read from the file
        assert f"{out / 'eval.json'} is" in said and ("evaluating the run again" in said or
                                                      "validating the run again" in said), said


@pytest.mark.parametrize("kind", sorted(RUNS))
def test_another_runs_checkpoint_is_refused_in_one_line_and_nothing_changes(runs, tmp_path, capsys, kind):
    ref, other = runs[kind]
    out = tmp_path / "run"
    shutil.copytree(ref, out)
    shutil.copyfile(other / "checkpoint.pt", out / "checkpoint.pt")
    (out / "eval.json").unlink()   # so the rerun needs the checkpoint
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main([*RUNS[kind], "--seed", "0", "--out", str(out)]) == 2
    err = one_error_line(capsys)
    assert f"{out / 'checkpoint.pt'} is another run's checkpoint (seed: 1 -> 0)" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("kind", sorted(RUNS))
def test_another_runs_config_is_refused_in_one_line_and_nothing_changes(runs, tmp_path, capsys, kind):
    ref, other = runs[kind]
    out = tmp_path / "run"
    shutil.copytree(ref, out)
    shutil.copyfile(other / "config.json", out / "config.json")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main([*RUNS[kind], "--seed", "0", "--out", str(out)]) == 2
    assert "holds another config (seed: 1 -> 0)" in one_error_line(capsys)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# -- `arith eval --out`: never another command's file, always the name the user typed --------------

def no_evaluation(*a, **k):
    raise AssertionError("evaluated before the output was checked")


def test_arith_eval_never_replaces_the_training_runs_evaluation_without_force(runs, tmp_path, capsys, monkeypatch):
    ref, _ = runs["arith"]
    out = tmp_path / "run"
    shutil.copytree(ref, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(arith_evaluate, "evaluate_model", no_evaluation)
    capsys.readouterr()
    for name in ("eval.json", "metrics.jsonl", "config.json"):
        assert main(["arith", "eval", str(out), "--out", str(out / name), "--no-progress"]) == 2
        err = one_error_line(capsys)
        assert f"--out {out / name} is the training run's own {name}" in err and "--force" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    monkeypatch.undo()
    assert main(["arith", "eval", str(out), "--out", str(out / "eval.json"), "--force", "--no-progress",
                 "--device", "cpu"]) == 0
    assert json.loads((out / "eval.json").read_text())["cells"] == json.loads(before["eval.json"])["cells"]


def test_arith_eval_out_a_folder_names_the_folder_and_writes_nothing(runs, tmp_path, capsys, monkeypatch):
    ref, _ = runs["arith"]
    folder = tmp_path / "results"
    folder.mkdir()
    monkeypatch.setattr(arith_evaluate, "evaluate_model", no_evaluation)
    capsys.readouterr()
    assert main(["arith", "eval", str(ref), "--out", str(folder), "--no-progress"]) == 2
    err = one_error_line(capsys)
    assert f"--out {folder} is a folder" in err and ".tmp" not in err, err
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("kind", ["lm", "mlm"])
def test_lm_and_mlm_eval_out_on_a_training_runs_file_is_refused_before_the_work(runs, tmp_path, capsys, kind):
    ref, _ = runs[kind]
    out = tmp_path / "run"
    shutil.copytree(ref, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    for name in ("eval.json", "checkpoint.pt"):
        assert main([kind, "eval", str(out), "--out", str(out / name), "--no-progress", "--device", "cpu"]) == 2
        assert f"{out / name} is a file, not a folder" in one_error_line(capsys)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_failed_atomic_write_names_the_file_not_its_temporary(tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(OSError) as e:
        io.write_json(tmp_path / "taken", {"a": 1})
    assert e.value.filename == str(tmp_path / "taken") and e.value.filename2 is None
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]


def test_the_config_digest_of_a_record_tells_two_seeds_apart(runs):
    (a, b) = runs["che"]
    assert json.loads((a / "eval.json").read_text())["config_digest"] != \
        json.loads((b / "eval.json").read_text())["config_digest"]
    assert torch.load(a / "checkpoint.pt", weights_only=False)["config"]["seed"] == 0
