"""`lengen sweep run --group-size`: which runs train together, that a grouped sweep gives the
ungrouped sweep's results, that a diverged member fails alone, and that a sweep killed mid-group
resumes every member."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lengen.sweeps import SweepOptions, expand, load_spec, run_sweep
from lengen.sweeps.grouping import plan_groups
from lengen.sweeps.sweep_dir import SweepDir
from test_sweeps import CLI, TIMING, read_csv, write_spec


def groups_of(spec_path, size, tmp_path):
    spec = load_spec(spec_path)
    groups = plan_groups(expand(spec), spec.command, SweepDir(tmp_path / "none"), size)
    return [[(r.config.model.pe, r.config.seed, r.config.lr) for r in g] for g in groups]


def test_groups_are_runs_that_differ_in_seed_or_lr_in_grid_order(tmp_path):
    spec = write_spec(tmp_path / "s.yaml", {"pe": ["rope", "alibi"], "lr": [1e-3, 3e-3], "seed": [0, 1, 2]})
    assert groups_of(spec, 4, tmp_path) == [
        [("rope", 0, 1e-3), ("rope", 1, 1e-3), ("rope", 2, 1e-3), ("rope", 0, 3e-3)],
        [("rope", 1, 3e-3), ("rope", 2, 3e-3)],
        [("alibi", 0, 1e-3), ("alibi", 1, 1e-3), ("alibi", 2, 1e-3), ("alibi", 0, 3e-3)],
        [("alibi", 1, 3e-3), ("alibi", 2, 3e-3)]]
    assert groups_of(spec, 1, tmp_path) == [[g] for g in sum(groups_of(spec, 4, tmp_path), [])]
    # a recurrent model trains alone, whatever the size
    rec = write_spec(tmp_path / "r.yaml", {"seed": [0, 1]}, {"model": "lstm", "layers": 5, "heads": 8,
                                                               "d_model": 64, "d_ff": 256})
    assert [len(g) for g in groups_of(rec, 8, tmp_path)] == [1, 1]


def test_a_grouped_sweep_gives_the_ungrouped_results(tmp_path):
    spec = load_spec(write_spec(tmp_path / "s.yaml", {"lr": [1e-3, 3e-3], "seed": [0, 1]}, {"dropout": 0.0}))
    alone, grouped = tmp_path / "alone", tmp_path / "grouped"
    run_sweep(spec, alone, SweepOptions(device="cpu", workers=1, group_size=1, progress=False))
    counts = run_sweep(spec, grouped, SweepOptions(device="cpu", workers=1, group_size=4, progress=False))
    assert counts["done"] == 4 and counts["failed"] == 0
    a, g = read_csv(alone / "results.csv", TIMING), read_csv(grouped / "results.csv", TIMING)
    assert [r["run_id"] for r in a] == [r["run_id"] for r in g]
    for ra, rg in zip(a, g):
        assert float(rg["score"]) == pytest.approx(float(ra["score"]), abs=1e-9)
    logs = [(grouped / "logs" / f"{r['run_id']}.log").read_text() for r in g]
    assert all("in a group of 4" in log and log.count("finished:") == 1 for log in logs)


def test_a_diverged_member_fails_alone(tmp_path):
    spec = load_spec(write_spec(tmp_path / "s.yaml", {"lr": [1e-3, 1e30]}, {"grad_clip": 1e30, "steps": 40}))
    out = tmp_path / "sweep"
    counts = run_sweep(spec, out, SweepOptions(device="cpu", workers=1, group_size=2, progress=False))
    assert (counts["done"], counts["failed"]) == (1, 1)
    failure = next((out / "state").glob("*.failure.json"))
    assert "diverged" in json.loads(failure.read_text())["error"]


def test_a_sweep_killed_mid_group_resumes_every_member(tmp_path):
    steps = 300
    spec = write_spec(tmp_path / "s.yaml", {"seed": [0, 1, 2]},
                      {"steps": steps, "checkpoint_every": 20, "log_every": 10, "d_model": 16, "heads": 4,
                       "dropout": 0.0})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def cmd(out):
        return CLI + ["sweep", "run", str(spec), "--out", str(out), "--device", "cpu", "--workers", "1",
                      "--group-size", "3", "--no-progress"]

    ref = tmp_path / "ref"
    subprocess.run(cmd(ref), check=True, env=env, capture_output=True, timeout=600)
    out = tmp_path / "killed"
    proc = subprocess.Popen(cmd(out), env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def logged_step(run: Path) -> int:
        try:
            return json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"]
        except (OSError, IndexError, ValueError):
            return 0

    deadline = time.time() + 300
    while time.time() < deadline:  # kill once the group is part-way through its training
        dirs = list((out / "runs").glob("*")) if (out / "runs").exists() else []
        if len(dirs) == 3 and all(20 < logged_step(d) < steps for d in dirs):
            break
        time.sleep(0.01)
    else:
        pytest.fail("the group never reached a part-trained state")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not any((d / "eval.json").exists() for d in (out / "runs").iterdir())
    subprocess.run(cmd(out), check=True, env=env, capture_output=True, timeout=600)
    for log in (out / "logs").glob("*.log"):
        text = log.read_text()
        assert text.count("finished:") == 1 and "resume in a group of 3" in text, text
    assert (out / "accuracy_by_length.csv").read_bytes() == (ref / "accuracy_by_length.csv").read_bytes()
    assert read_csv(out / "results.csv", TIMING) == read_csv(ref / "results.csv", TIMING)
