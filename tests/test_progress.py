"""Progress reports: a terminal gets tqdm; a log file gets whole lines, no carriage returns."""

import io
import subprocess
import sys

from lengen import progress


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_a_file_gets_plain_lines_now_and_then(monkeypatch):
    monkeypatch.setattr(progress, "LINE_EVERY_S", 3600.0)
    out = io.StringIO()
    bar = progress.progress_bar(1000, "work", stream=out)
    for i in range(1000):
        bar.update(1)
        bar.set_postfix(loss=1.0 / (i + 1))
    bar.close()
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 2  # the start and the end, nothing between within the hour
    assert lines[0].startswith("work:   0%") and "1000/1000" in lines[1]


def test_a_terminal_gets_tqdm():
    out = Tty()
    bar = progress.progress_bar(10, "work", stream=out)
    bar.update(10)
    bar.close()
    assert "\r" in out.getvalue()


def test_train_logged_to_a_file_has_no_carriage_returns(tmp_path):
    log = tmp_path / "log.txt"
    with open(log, "w") as f:
        r = subprocess.run([sys.executable, "-c", "import sys; from lengen.cli import main; sys.exit(main())",
                            "train", "--task", "parity_check", "--steps", "6", "--batch-size", "4",
                            "--train-length", "2", "--max-length", "3", "--eval-samples", "4", "--layers", "1",
                            "--d-model", "8", "--heads", "2", "--d-ff", "8", "--device", "cpu",
                            "--out", str(tmp_path / "run")], stdout=f, stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0
    text = log.read_text()
    assert "\r" not in text and "train parity_check" in text and "6/6" in text
