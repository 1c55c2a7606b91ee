"""Faults a lab meets while a sweep runs: the sweep's main process killed alone (as an
out-of-memory killer does), two runners started on one folder, a stale or deleted runner lock, a
truncated results table. Each ends in one line or a clean resume, nothing lost, every run trained
exactly once. Real processes and signals, tiny models."""

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lengen.errors import LengenError
from lengen.sweeps.sweep_dir import SweepDir

CLI = [sys.executable, "-c", "import sys; from lengen.cli import main; sys.exit(main())"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TINY = {"task": "parity_check", "batch_size": 8, "train_length": 3, "max_length": 5, "eval_samples": 8,
        "layers": 1, "heads": 2, "d_ff": 16, "log_every": 10}


def spec_file(tmp_path: Path, steps: int, d_model: int = 8) -> Path:
    path = tmp_path / f"s{steps}.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "grid": {"pe": ["rope", "alibi"], "seed": [0, 1]},
                                    "fixed": {**TINY, "steps": steps, "d_model": d_model,
                                              "checkpoint_every": 20}}))
    return path


def sweep_cmd(spec: Path, out: Path, *extra) -> list:
    return CLI + ["sweep", "run", str(spec), "--out", str(out), "--device", "cpu", "--no-progress", *extra]


def trained_once(out: Path, runs: int = 4) -> None:
    logs = sorted((out / "logs").glob("*.log"))
    assert len(logs) == runs
    for log in logs:
        assert log.read_text().count("finished:") == 1, log.read_text()
    assert len((out / "results.csv").read_text().strip().splitlines()) == runs + 1


def children(pid: int) -> list[int]:
    """Live processes whose parent is `pid` and that are multiprocessing workers."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z" and b"spawn_main" in cmdline:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"   # a zombie has finished; nobody may have reaped it in a container


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killing_the_main_process_alone_ends_its_workers_and_a_rerun_resumes(tmp_path):
    spec, out = spec_file(tmp_path, steps=600, d_model=16), tmp_path / "out"
    proc = subprocess.Popen(sweep_cmd(spec, out, "--workers", "2"), env=ENV, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list(out.glob("state/*.progress.json")):
            time.sleep(0.05)
        workers = children(proc.pid)
        assert workers, "the sweep started no worker processes"
        os.kill(proc.pid, signal.SIGKILL)   # the main process only, as an OOM killer would
        proc.wait()
        deadline = time.time() + 15
        while time.time() < deadline and any(alive(w) for w in workers):
            time.sleep(0.1)
        assert not any(alive(w) for w in workers), "workers train on without their parent"
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if alive(proc.pid) else None
        for w in children(proc.pid):
            os.kill(w, signal.SIGKILL)
    status = subprocess.run(CLI + ["sweep", "status", str(out)], env=ENV, capture_output=True, text=True)
    assert " 0 running" in status.stdout and "no runner:" in status.stdout, status.stdout
    subprocess.run(sweep_cmd(spec, out, "--workers", "2"), env=ENV, check=True, capture_output=True,
                   timeout=600)
    trained_once(out)


@pytest.mark.parametrize("offset", [0.0, 0.5, 1.0, 3.0])
def test_two_runners_on_one_folder_one_runs_the_other_is_told_who(tmp_path, offset):
    spec, out = spec_file(tmp_path, steps=800, d_model=16), tmp_path / "out"
    first = subprocess.Popen(sweep_cmd(spec, out, "--workers", "1"), env=ENV, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    time.sleep(offset)
    second = subprocess.Popen(sweep_cmd(spec, out, "--workers", "1"), env=ENV, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    results = {p: p.communicate(timeout=600) for p in (first, second)}
    codes = sorted(p.returncode for p in results)
    assert codes == [0, 2], {p.returncode: r for p, r in results.items()}
    winner = next(p for p in results if p.returncode == 0)
    loser = next(p for p in results if p.returncode == 2)
    err = results[loser][1].strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lengen: error:"), err
    assert f"pid {winner.pid} on " in err[0] and "is being run by another" in err[0]
    assert results[loser][0] == ""   # the refused runner printed no summary
    trained_once(out)


def test_a_stale_runner_lock_is_taken_over(tmp_path):
    spec, out = spec_file(tmp_path, steps=20), tmp_path / "out"
    out.mkdir()
    (out / SweepDir.RUNNER).write_text("pid 999999 on elsewhere since 2026-01-01T00:00:00\n")
    assert SweepDir(out).runner() is None   # nobody holds it: the process is gone
    done = subprocess.run(sweep_cmd(spec, out, "--workers", "1"), env=ENV, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    trained_once(out)
    assert SweepDir(out).runner() is None and "999999" not in (out / SweepDir.RUNNER).read_text()


def test_a_runner_killed_before_its_run_list_leaves_a_folder_a_rerun_takes(tmp_path):
    """Killed after the lock and sweep.yaml (and an atomic-write temporary) but before sweep.json:
    the folder is this sweep's beginning, not a foreign folder."""
    spec, out = spec_file(tmp_path, steps=20), tmp_path / "out"
    out.mkdir()
    (out / SweepDir.RUNNER).write_text("pid 999999 on elsewhere since 2026-01-01T00:00:00\n")
    (out / SweepDir.SPEC).write_text(spec.read_text())
    (out / ".sweep.json.abc123.tmp").write_text("{")
    done = subprocess.run(sweep_cmd(spec, out, "--workers", "1"), env=ENV, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    trained_once(out)


def test_a_new_folder_held_by_a_runner_names_the_runner_not_a_foreign_folder(tmp_path):
    """The moment between another runner's sweep.yaml and its sweep.json (the race the
    two-runner test hit): the refusal names the holder."""
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'pid 4242 on here since now'); "
        "print('held', flush=True); time.sleep(60)"), str(out / SweepDir.RUNNER)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        (out / SweepDir.SPEC).write_text("name: t\n")
        (out / "notes.txt").write_text("a file no runner writes")   # even beside a foreign file
        with pytest.raises(LengenError, match=r"being run by another .*\(pid 4242 on here since now\)"):
            SweepDir(out).check_writable()
    finally:
        holder.kill()
        holder.wait()
    with pytest.raises(LengenError, match="not empty and holds no lengen sweep"):
        SweepDir(out).check_writable()   # the holder gone, the foreign file is refused
    (out / "notes.txt").unlink()
    SweepDir(out).check_writable()   # lock and sweep file alone: a killed runner's beginning


def test_a_deleted_runner_lock_still_trains_every_run_once(tmp_path):
    """Someone deletes runner.lock under a running sweep: a second runner then gets in, but the
    per-run locks and done files still keep every run to one training."""
    spec, out = spec_file(tmp_path, steps=800, d_model=16), tmp_path / "out"
    first = subprocess.Popen(sweep_cmd(spec, out, "--workers", "1"), env=ENV, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list(out.glob("state/*.progress.json")):
        time.sleep(0.05)
    (out / SweepDir.RUNNER).unlink()
    second = subprocess.run(sweep_cmd(spec, out, "--workers", "1"), env=ENV, capture_output=True, text=True,
                            timeout=600)
    first.communicate(timeout=600)
    assert first.returncode == 0
    # the second either finds every run done or locked (one line, exit 2) or trains what is left
    assert second.returncode == 0 or (second.returncode == 2 and len(second.stderr.splitlines()) == 1
                                      and second.stderr.startswith("lengen: error:")), second.stderr
    trained_once(out)


def test_a_truncated_results_table_is_rebuilt_by_a_rerun(tmp_path):
    spec, out = spec_file(tmp_path, steps=20), tmp_path / "out"
    subprocess.run(sweep_cmd(spec, out, "--workers", "1"), env=ENV, check=True, capture_output=True,
                   timeout=600)
    whole = (out / "results.csv").read_bytes()
    (out / "results.csv").write_bytes(whole[: len(whole) // 2])
    again = subprocess.run(sweep_cmd(spec, out, "--workers", "1"), env=ENV, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0 and "4 done, 0 to run" in again.stdout
    rows = lambda text: sorted(line.split(",")[0] for line in text.splitlines()[1:])  # noqa: E731
    assert rows((out / "results.csv").read_text()) == rows(whole.decode())
    trained_once(out)


def test_a_ray_cluster_that_loses_a_node_mid_sweep_ends_in_the_uninterrupted_tables(tmp_path):
    """A real two-node Ray cluster on this machine (Ray's own test cluster: a head with 1 CPU and
    a second node with 2, each its own raylet processes), a sweep through --ray-address, the
    second node killed while it trains two runs: Ray retries them on the head, they resume from
    their checkpoints, and the tables equal those of the uninterrupted local sweep."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    spec = spec_file(tmp_path, steps=600, d_model=16)
    ref, out = tmp_path / "ref", tmp_path / "ray"
    subprocess.run(sweep_cmd(spec, ref, "--workers", "1"), env=ENV, check=True, capture_output=True, timeout=600)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        second = cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        proc = subprocess.Popen(sweep_cmd(spec, out, "--backend", "ray", "--ray-address", cluster.address),
                                env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def checkpointed_and_unfinished() -> int:
            runs = list((out / "runs").glob("*")) if (out / "runs").exists() else []
            return sum((r / "checkpoint.pt").exists() and not (r / "eval.json").exists() for r in runs)

        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None and checkpointed_and_unfinished() < 3:
            time.sleep(0.05)
        assert proc.poll() is None and checkpointed_and_unfinished() == 3, "never 3 runs at once"
        cluster.remove_node(second)   # its raylet and workers die, with two runs part-way
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        cluster.shutdown()
    assert proc.returncode == 0, stderr[-2000:]
    assert "4 done, 0 failed, 0 pending" in stdout
    trained_once(out)
    assert sum("resume" in log.read_text() for log in (out / "logs").glob("*.log")) >= 2
    timing = {"seconds", "train_seconds", "eval_seconds"}
    rows = lambda path: [{k: v for k, v in r.items() if k not in timing}   # noqa: E731
                         for r in csv.DictReader(open(path))]
    assert rows(out / "results.csv") == rows(ref / "results.csv")
    assert (out / "accuracy_by_length.csv").read_bytes() == (ref / "accuracy_by_length.csv").read_bytes()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_killed_mid_run_is_replaced_and_its_run_resumes(tmp_path):
    spec, out = spec_file(tmp_path, steps=600, d_model=16), tmp_path / "out"
    proc = subprocess.Popen(sweep_cmd(spec, out, "--workers", "2"), env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    runs = out / "runs"
    while time.time() < deadline and proc.poll() is None and sum(
            (r / "checkpoint.pt").exists() and not (r / "eval.json").exists()
            for r in (runs.glob("*") if runs.exists() else [])) < 2:
        time.sleep(0.05)
    workers = children(proc.pid)
    assert proc.poll() is None and len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)   # one worker, as an out-of-memory killer might
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-2000:]
    assert "4 done, 0 failed, 0 pending" in stdout
    trained_once(out)
    assert any("resume" in log.read_text() for log in (out / "logs").glob("*.log"))
