"""Arithmetic sweeps (`command: arith`): the tables against `lengen arith train` run by hand, the
report's statistics against numpy/scipy from the runs' eval.json files, the report of an export,
and the presets."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as scipy_stats

from lengen.cli import main
from lengen.sweeps import SweepOptions, expand, load_spec, run_sweep

TINY = {"layers": 1, "heads": 2, "d_model": 32, "d_ff": 64, "batch_size": 32, "warmup": 5, "steps": 60,
        "lr": 3.0e-3, "train_digits": 1, "test_digits": 2, "eval_samples": 10, "log_every": 20, "abacus_k": 2}
FLAGS = ["--layers", "1", "--heads", "2", "--d-model", "32", "--d-ff", "64", "--batch-size", "32", "--warmup", "5",
         "--steps", "60", "--lr", "3e-3", "--train-digits", "1", "--test-digits", "2", "--eval-samples", "10",
         "--log-every", "20", "--abacus-k", "2"]


@pytest.fixture(scope="module")
def seeds_sweep(tmp_path_factory):
    """A finished sweep of 3 seeds x abacus and rope (6 tiny runs)."""
    root = tmp_path_factory.mktemp("arith-sweep")
    spec = root / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "arith", "command": "arith", "grid": {"seed": [0, 1, 2],
                                    "pe": ["abacus", "rope"]}, "fixed": TINY}, sort_keys=False))
    counts = run_sweep(load_spec(spec), root / "sweep", SweepOptions(device="cpu", workers=1, threads=1, progress=False))
    assert counts["done"] == 6 and counts["failed"] == 0
    return root / "sweep"


def read_csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_tables_equal_lengen_arith_train_by_hand(seeds_sweep, tmp_path):
    rows = read_csv(seeds_sweep / "results.csv")
    (row,) = [r for r in rows if r["pe"] == "abacus" and r["seed"] == "1"]
    out = tmp_path / "by-hand"
    assert main(["arith", "train", *FLAGS, "--pe", "abacus", "--seed", "1", "--out", str(out), "--no-progress",
                 "--device", "cpu", "--threads", "1"]) == 0
    record = json.loads((out / "eval.json").read_text())
    assert float(row["in_distribution"]) == pytest.approx(record["in_distribution"])
    assert float(row["train_loss"]) == pytest.approx(record["train_loss"], rel=1e-6)
    cells = [r for r in read_csv(seeds_sweep / "arith_by_cell.csv") if r["run_id"] == row["run_id"]]
    assert [(int(c["length"]), int(c["j"]), int(c["correct"]), int(c["total"])) for c in cells] == \
        sorted([(c["i"], c["j"], c["correct"], c["total"]) for c in record["cells"]], key=lambda t: (t[1], t[0]))


def test_report_is_mean_sample_std_and_t_interval_over_seeds(seeds_sweep, tmp_path, capsys):
    assert main(["report", str(seeds_sweep), "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    runs = pd.read_csv(seeds_sweep / "results.csv", dtype={"run_id": str})
    records = {rid: json.loads((seeds_sweep / "runs" / rid / "eval.json").read_text()) for rid in runs["run_id"]}
    abacus = [rid for rid, pe in zip(runs["run_id"], runs["pe"]) if pe == "abacus"]
    # in distribution: the mean of the run's cells within the training digits, by hand from eval.json
    x = np.array([100 * np.mean([c["accuracy"] for c in records[r]["cells"] if max(c["i"], c["j"]) <= 1])
                  for r in abacus])
    mean, std = x.mean(), np.std(x, ddof=1)
    half = scipy_stats.t.ppf(0.975, 2) * std / math.sqrt(3)
    table = pd.read_csv(tmp_path / "report" / "arith_table.csv")
    got = table[(table["variant"] == "abacus / standard") & (table["metric"] == "in_distribution")].iloc[0]
    assert got["n"] == 3 and got["mean"] == pytest.approx(mean) and got["std"] == pytest.approx(std)
    assert (got["low"], got["high"]) == (pytest.approx(mean - half), pytest.approx(mean + half))
    # accuracy against length: the diagonal cell (2, 2), pooled per run, then over seeds
    y = np.array([100 * [c for c in records[r]["cells"] if (c["i"], c["j"]) == (2, 2)][0]["accuracy"] for r in abacus])
    by_length = pd.read_csv(tmp_path / "report" / "arith_by_length.csv")
    got = by_length[(by_length["variant"] == "abacus / standard") & (by_length["length"] == 2)].iloc[0]
    assert got["mean"] == pytest.approx(y.mean()) and got["n"] == 3
    # the same in arith_by_length.md, past the 1 training digit: mean [t interval clipped to 0-100]
    half_y = scipy_stats.t.ppf(0.975, 2) * np.std(y, ddof=1) / math.sqrt(3)
    low, high = max(y.mean() - half_y, 0), min(y.mean() + half_y, 100)
    md = (tmp_path / "report" / "arith_by_length.md").read_text()
    assert "| variant | n | 2 |" in md and "| 1 |" not in md
    assert f"| abacus / standard | 3 | {y.mean():.1f} [{low:.1f}, {high:.1f}] |" in md, md
    clipped = f"[{max(mean - half, 0):.1f}, {min(mean + half, 100):.1f}]"   # the table's interval is a percentage
    assert f"| abacus / standard | {mean:.1f} ± {std:.1f} {clipped} (n=3) |" in printed
    for name in ("heatmap-abacus-standard.png", "heatmap-rope-standard.png", "accuracy_vs_length.png", "index.html"):
        assert (tmp_path / "report" / name).exists(), name


def test_report_of_the_export_equals_the_report_of_the_folder(seeds_sweep, tmp_path):
    exported = tmp_path / "export"
    assert main(["sweep", "export", str(seeds_sweep), "--out", str(exported)]) == 0
    assert not (exported / "runs").exists()
    assert main(["report", str(seeds_sweep), "--out", str(tmp_path / "from-folder")]) == 0
    assert main(["report", str(exported), "--out", str(tmp_path / "from-export")]) == 0
    for name in ("arith_table.md", "arith_table.csv", "arith_by_length.csv", "arith_by_length.md",
                 "arith_cells.csv"):
        assert (tmp_path / "from-folder" / name).read_text() == (tmp_path / "from-export" / name).read_text(), name


@pytest.mark.parametrize("name", ["abacus2024-mini", "abacus2024"])
def test_the_arith_presets(name):
    spec = load_spec(name)
    planned = expand(spec)
    assert spec.command == "arith" and len(planned) == 18
    assert [r.config.seed for r in planned[:6]] == [0] * 6        # seeds first in the grid
    variants = {(r.config.pe, r.config.positions, r.config.format) for r in planned}
    assert variants == {("none", "standard", "reversed"), ("rope", "standard", "reversed"),
                        ("abacus", "standard", "reversed"), ("abacus+rope", "standard", "reversed"),
                        ("rope", "coupled", "padded"), ("learned", "coupled", "padded")}
    digits = {(r.config.train_digits, r.config.test_digits) for r in planned}
    assert digits == ({(5, 10)} if name == "abacus2024-mini" else {(20, 100)})
