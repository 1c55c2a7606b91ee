"""Masked-LM sweeps (`command: mlm`): the tables against `lengen mlm train` + `lengen mlm eval` run
by hand, resume after an interruption, the `eval:` section's checks, the report's statistics
against numpy/scipy, the report of an export, the variant labels and the presets."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as scipy_stats

import lengen.mlm.train as train_mod
from lengen.cli import main
from lengen.reports.mlm import add_variants
from lengen.sweeps import SweepOptions, expand, load_spec, run_sweep
from lengen.sweeps.kinds.mlm import EVAL_COLUMNS
from guards import interrupt_on_call
from tiny_lm import CORPUS

TINY = {"corpus": CORPUS, "train_length": 16, "layers": 1, "heads": 2, "d_model": 16, "d_ff": 32, "batch_size": 4,
        "warmup": 2, "steps": 6, "checkpoint_every": 3, "log_every": 2, "val_windows": 4}
#: the same run as `lengen mlm train` flags
TINY_FLAGS = ["--corpus", CORPUS, "--train-length", "16", "--layers", "1", "--heads", "2", "--d-model", "16",
              "--d-ff", "32", "--batch-size", "4", "--warmup", "2", "--steps", "6", "--checkpoint-every", "3",
              "--log-every", "2", "--val-windows", "4"]
EVAL = {"lengths": [16, 32], "windows": 4, "log_n": "both"}
TIMING = {"seconds", "train_seconds", "eval_seconds"}


def write_spec(path: Path, grid: dict, evaluation=EVAL) -> Path:
    data = {"name": "mlm", "command": "mlm", "grid": grid, "fixed": TINY, "eval": evaluation}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sweep(spec, out):
    return run_sweep(load_spec(spec), out, SweepOptions(device="cpu", workers=1, threads=1, progress=False))


def read_csv(path: Path, drop=frozenset()) -> list[dict]:
    with open(path) as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


@pytest.fixture(scope="module")
def seeds_sweep(tmp_path_factory):
    """A finished sweep of 3 seeds x standard and randomized positions (6 tiny runs)."""
    root = tmp_path_factory.mktemp("mlm-sweep")
    out = root / "sweep"
    counts = sweep(write_spec(root / "s.yaml", {"seed": [0, 1, 2], "positions": ["standard", "randomized"]}), out)
    assert counts["done"] == 6 and counts["failed"] == 0
    return out


def test_tables_equal_mlm_train_and_eval_run_by_hand(tmp_path):
    out = tmp_path / "sweep"
    assert sweep(write_spec(tmp_path / "s.yaml", {"seed": [1], "positions": ["standard", "randomized"]}),
                 out)["done"] == 2
    rows = read_csv(out / "results.csv")
    assert [(r["positions"], r["seed"]) for r in rows] == [("standard", "1"), ("randomized", "1")]
    swept = read_csv(out / "mlm_by_length.csv")
    assert list(swept[0]) == ["run_id", *EVAL_COLUMNS]
    # each run at `lengen mlm eval`'s default test positions for it
    modes = {r["run_id"]: sorted({v["test_positions"] for v in swept if v["run_id"] == r["run_id"]} - {""})
             for r in rows}
    assert [modes[r["run_id"]] for r in rows] == [["standard"], ["random", "uniform"]]

    hand = tmp_path / "hand"
    assert main(["mlm", "train", *TINY_FLAGS, "--positions", "randomized", "--seed", "1", "--device", "cpu",
                 "--threads", "1", "--no-progress", "--out", str(hand)]) == 0
    assert main(["mlm", "eval", str(hand), "--lengths", "16,32", "--windows", "4", "--log-n", "both", "--device",
                 "cpu", "--threads", "1", "--no-progress", "--out", str(tmp_path / "hand-eval")]) == 0
    record = json.loads((hand / "eval.json").read_text())
    row = rows[1]
    for key in ("train_loss", "val_accuracy", "val_bpb", "unigram_accuracy", "unigram_bpb", "parameters"):
        assert float(row[key]) == pytest.approx(record[key], rel=1e-9, abs=0), key
    assert row["device"] == "cpu" and float(row["train_seconds"]) > 0 and float(row["eval_seconds"]) > 0
    # the long table's rows of that run are `lengen mlm eval`'s results.csv, column for column
    alone = read_csv(tmp_path / "hand-eval" / "results.csv")
    mine = [{k: v for k, v in r.items() if k != "run_id"} for r in swept if r["run_id"] == row["run_id"]]
    assert [list(r) for r in mine] == [list(r) for r in alone]
    assert [(r["method"], r["length"]) for r in mine] == [(r["method"], r["length"]) for r in alone]
    for a, b in zip(mine, alone):
        for key in ("accuracy", "bpb", "nll", "acc_first", "acc_last_half"):
            assert float(a[key]) == pytest.approx(float(b[key]), rel=1e-9, abs=0, nan_ok=True), (a, b)
        assert (a["masked_tokens"], a["windows"], a["log_n"]) == (b["masked_tokens"], b["windows"], b["log_n"])


def test_an_interrupted_run_resumes_to_the_uninterrupted_tables(tmp_path, monkeypatch):
    grid = {"seed": [0], "positions": ["randomized"]}
    ref = tmp_path / "ref"
    assert sweep(write_spec(tmp_path / "ref.yaml", grid), ref)["done"] == 1
    out = tmp_path / "cut"
    spec = write_spec(tmp_path / "cut.yaml", grid)
    # a Ctrl-C in the 5th training step: steps 1-4 ran, the checkpoint holds step 3
    monkeypatch.setattr(train_mod, "mask_tokens", interrupt_on_call(train_mod.mask_tokens, 5))
    with pytest.raises(KeyboardInterrupt):
        sweep(spec, out)
    monkeypatch.undo()
    (run,) = (out / "runs").iterdir()
    assert (run / "checkpoint.pt").exists() and not (run / "eval.json").exists()
    assert not list(run.glob("sweep-eval-*.json"))
    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 0   # a report before any run finished
    assert "No run has finished yet (0 of 1)" in (tmp_path / "report" / "mlm_table.md").read_text()
    assert sweep(spec, out)["done"] == 1
    log = (out / "logs" / f"{run.name}.log").read_text()
    assert "resume" in log and log.count("finished:") == 1, log
    assert (out / "mlm_by_length.csv").read_bytes() == (ref / "mlm_by_length.csv").read_bytes()
    assert read_csv(out / "results.csv", TIMING) == read_csv(ref / "results.csv", TIMING)


def test_a_bad_eval_section_is_one_line_naming_every_problem_exit_2(tmp_path, capsys):
    bad = {"lenghts": [16], "log_n": "sometimes", "windows": 0, "test_positions": ["diagonal"], "seed": "x"}
    spec = write_spec(tmp_path / "s.yaml", {"seed": [0], "positions": ["standard"]}, evaluation=bad)
    out = tmp_path / "sweep"
    assert main(["sweep", "run", str(spec), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lengen: error: ") and err.count("\n") == 1, err
    for problem in ("eval.lenghts: unknown `lengen mlm eval` option", "eval.log_n: log-n must be one of off, on, both",
                    "eval.windows: windows must be >= 1", "eval.test_positions: unknown test position mode 'diagonal'",
                    "eval.seed: seed must be an integer"):
        assert problem in err, (problem, err)
    assert "Traceback" not in err and not out.exists()


def test_report_cells_are_mean_sample_std_and_t_interval_over_seeds(seeds_sweep, tmp_path, capsys):
    assert main(["report", str(seeds_sweep), "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    runs = pd.read_csv(seeds_sweep / "results.csv", dtype={"run_id": str})
    values = pd.read_csv(seeds_sweep / "mlm_by_length.csv", dtype={"run_id": str}).merge(
        runs[["run_id", "positions"]], on="run_id")
    x = values[(values["positions"] == "randomized") & (values["method"] == "uniform+logn")
               & (values["length"] == 32)]["bpb"].to_numpy(dtype=float)
    assert len(x) == 3 and np.std(x) > 0
    mean, std = x.mean(), np.std(x, ddof=1)
    half = scipy_stats.t.ppf(0.975, len(x) - 1) * std / math.sqrt(len(x))
    table = pd.read_csv(tmp_path / "report" / "mlm_table.csv")
    cell = table[(table["variant"] == "randomized") & (table["test_positions"] == "uniform") & table["log_n"]
                 & (table["length"] == 32) & (table["metric"] == "bpb")]
    assert len(cell) == 1
    got = cell.iloc[0]
    assert got["n"] == 3 and got["planned"] == 3
    assert got["mean"] == pytest.approx(mean, rel=1e-9)
    assert got["std"] == pytest.approx(std, rel=1e-9)
    assert (got["low"], got["high"]) == (pytest.approx(mean - half, rel=1e-9), pytest.approx(mean + half, rel=1e-9))
    # the Markdown row: bits per byte at 32 is its fifth value column (acc@16, acc@32, bpb@16, bpb@32)
    (line,) = [ln for ln in printed.splitlines() if ln.startswith("| randomized | uniform | on |")]
    assert line.split(" | ")[6] == f"{mean:.2f} ± {std:.2f} (n=3)"
    md = (tmp_path / "report" / "mlm_table.md").read_text()
    assert line in md and "| unigram | — | — |" in md
    # mlm_intervals.md: the same cell's accuracy interval, from the values by hand
    a = values[(values["positions"] == "randomized") & (values["method"] == "uniform+logn")
               & (values["length"] == 32)]["accuracy"].to_numpy(dtype=float)
    half = scipy_stats.t.ppf(0.975, 2) * np.std(a, ddof=1) / math.sqrt(3)
    (row,) = [ln for ln in (tmp_path / "report" / "mlm_intervals.md").read_text().splitlines()
              if ln.startswith("| randomized | uniform | on |")]
    assert row.split(" | ")[4] == f"[{100 * (a.mean() - half):.1f}, {100 * (a.mean() + half):.1f}] (n=3)"
    assert (tmp_path / "report" / "index.html").exists()


def test_report_of_the_export_equals_the_report_of_the_folder(seeds_sweep, tmp_path):
    exported = tmp_path / "export"
    assert main(["sweep", "export", str(seeds_sweep), "--out", str(exported)]) == 0
    assert not (exported / "runs").exists()
    assert main(["report", str(seeds_sweep), "--out", str(tmp_path / "from-folder")]) == 0
    assert main(["report", str(exported), "--out", str(tmp_path / "from-export")]) == 0
    for name in ("mlm_table.md", "mlm_table.csv"):
        assert (tmp_path / "from-folder" / name).read_text() == (tmp_path / "from-export" / name).read_text(), name
    md = (tmp_path / "from-export" / "mlm_table.md").read_text()
    assert "| randomized | uniform | on |" in md and "| unigram | — | — |" in md


def test_a_variant_is_the_positions_and_every_option_that_varies_with_them():
    nan = float("nan")
    runs = pd.DataFrame({
        "run_id": list("abcdef"), "seed": [0, 1, 0, 0, 0, 1],
        "positions": ["standard", "standard", "randomized", "equal_mean", "equal_mean", "equal_mean"],
        "position_options.beta_shape": [nan, nan, nan, nan, 7.0, 7.0],   # results.csv's order: keys sorted
        "position_options.distribution": [nan, nan, nan, "exponential", "beta", "beta"],
        "lr": [1e-3] * 6, "train_loss": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "val_accuracy": [0.1] * 6})
    assert list(add_variants(runs)["variant"]) == [
        "standard", "standard", "randomized", "equal_mean, distribution=exponential",
        "equal_mean, beta_shape=7, distribution=beta", "equal_mean, beta_shape=7, distribution=beta"]


@pytest.mark.parametrize("name,runs", [("su2023-mlm-mini", 25), ("su2023-mlm-h2", 10)])
def test_the_mlm_presets(name, runs):
    spec = load_spec(name)
    planned = expand(spec)
    assert spec.command == "mlm" and len(planned) == runs
    assert [r.config.seed for r in planned[:runs // 5]] == [0] * (runs // 5)  # seeds first in the grid
    assert spec.evaluation == {"lengths": [64, 128, 256, 512], "windows": 64, "seed": 1234, "log_n": "both"}
    variants = {(r.config.positions, json.dumps(r.config.position_options, sort_keys=True)) for r in planned}
    steps = {r.config.steps for r in planned}
    if name == "su2023-mlm-mini":
        assert steps == {1500} and {r.config.warmup for r in planned} == {150}
        assert variants == {("standard", "{}"), ("randomized", "{}"),
                            ("equal_mean", '{"distribution": "exponential"}'),
                            ("equal_mean", '{"beta_shape": 7, "distribution": "beta", "test_length": 512}'),
                            ("equal_mean", '{"beta_shape": 0.875, "distribution": "beta", "test_length": 512}')}
    else:
        assert steps == {10000} and {r.config.warmup for r in planned} == {500}
        assert variants == {("standard", "{}"), ("randomized", "{}")}
