"""The command line: outputs, and bad input ending in one message and exit code 2."""

import json
import subprocess
import sys

import pytest

from lengen.cli import main

FAST = ["--layers", "1", "--heads", "2", "--d-model", "16", "--d-ff", "32", "--batch-size", "8",
        "--eval-samples", "8", "--no-progress"]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "lengen", *args], capture_output=True, text=True)


def test_train_then_eval_other_mode(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--task", "reverse_string", "--pe", "rope", "--positions", "randomized",
                 "--steps", "4", "--train-length", "4", "--max-length", "6", "--out", str(out), *FAST]) == 0
    ev = json.loads((out / "eval.json").read_text())
    assert ev["test_positions"] == "random" and ev["max_length"] == 6
    assert main(["eval", str(out), "--max-length", "8", "--positions", "uniform", "--no-progress"]) == 0
    ev2 = json.loads((out / "eval_uniform_M8.json").read_text())
    assert ev2["test_positions"] == "uniform" and len(ev2["accuracy_by_length"]) == 8
    assert "score" in capsys.readouterr().out


def test_tasks_lists_fifteen(capsys):
    from lengen.tasks import TASK_NAMES

    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in TASK_NAMES)


@pytest.mark.parametrize("args,message", [
    (["--task", "nope"], "unknown task 'nope'"),
    (["--pe", "nope"], "unknown positional encoding 'nope'"),
    (["--positions", "randomized", "--max-position", "30", "--train-length", "20", "--max-length", "25"],
     "exceeds max_position"),
    (["--train-length", "8", "--max-length", "6"], "max-length 6 < train-length 8"),
    (["--seed", "-1"], "seed must be >= 0"),
    (["--grad-clip", "-1"], "grad-clip must be > 0"),
    (["--pe-option", "base=abc"], "could not convert string to float"),
    (["--pe", "learned", "--max-position", "50", "--max-length", "60"], "max_position=50"),
    (["--steps", "-1"], "steps must be >= 0"),
    (["--pe-option", "nokey"], "KEY=VALUE"),
    (["--pe", "rope", "--pe-option", "bogus=1"], "bad options"),
])
def test_bad_input_one_message_exit_2(tmp_path, args, message):
    out = tmp_path / "run"
    r = run_cli("train", "--steps", "2", "--train-length", "4", "--max-length", "6", *FAST[:-1],
                "--out", str(out), *args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_run_dir_with_another_config_is_refused_untouched(tmp_path):
    out = tmp_path / "run"
    base = ["train", "--task", "parity_check", "--steps", "2", "--train-length", "3", "--max-length", "4",
            *FAST, "--out", str(out)]
    assert run_cli(*base).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    r = run_cli(*base, "--pe", "alibi")
    assert r.returncode == 2 and "holds another config" in r.stderr and "Traceback" not in r.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_eval_of_missing_run_is_clean(tmp_path):
    r = run_cli("eval", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "not a lengen run directory" in r.stderr and "Traceback" not in r.stderr


def test_output_cut_short_by_a_closed_pipe_is_not_a_traceback():
    # `lengen tasks | head -1`: the reader goes away; lengen stops quietly like a Unix tool
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "lengen", "sweep", "presets"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before lengen (still importing) prints anything
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err
