"""The CPU benchmark scripts still run against today's lengen, at toy sizes, and print what
docs' `bench` blocks render (scripts/build_docs.py): a markdown table with the expected columns,
one row per case, and a caption right above it. Their speeds are not checked here (benchmarks
measure, tests do not time); a script broken by an API change fails here, not in a GPU session
or when docs are rebuilt."""

import os
import subprocess
import sys
from pathlib import Path

from lengen.cli import build_parser, command_paths

ROOT = Path(__file__).resolve().parent.parent


def first_table(stdout: str) -> tuple[str, list[str], list[list[str]]]:
    """(caption, header cells, body rows) of the first markdown table, as build_docs' bench reads it."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[start:end]]
    return lines[start - 1].strip(), cells[0], cells[2:]


def run(script: str, *args: str) -> str:
    """The script's stdout; it imports this checkout's lengen, whatever the environment installed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_attention_kernel_prints_both_tables_with_captions():
    out = run("attention_kernel.py", "--threads", "1", "--train-lengths", "2,20", "--eval-batch", "1",
              "--rounds", "1", "--reps", "1", "--steps", "2", "--encodings", "rope,alibi")
    caption, header, rows = first_table(out)
    assert caption.startswith("attention per layer") and caption.endswith("1 thread")
    assert header[:6] == ["case", "shape [B,H,T,Dqk/Dv]", "pass", "SDPA ms", "kernel ms", "speedup"]
    # two train lengths plus the ALiBi and relative train rows, three eval rows
    assert [r[0] for r in rows] == ["train", "train", "train, ALiBi bias", "train, relative (72)", "eval",
                                    "eval, ALiBi bias", "eval, relative (72)"]
    model = out[out.index("CHE model end to end ("):]
    caption, header, rows = first_table(model)
    assert caption.startswith("CHE model end to end") and header[0] == "encoding"
    assert [r[0] for r in rows] == ["rope", "alibi"]
    assert all(float(c) > 0 for r in rows for c in r[1:])


def test_train_many_prints_one_row_per_encoding_size_and_bucketing():
    _, header, rows = first_table(run("train_many.py", "--threads", "1", "--steps", "1", "--warmup", "1",
                                      "--sizes", "2", "--buckets", "auto,1", "--encodings", "rope",
                                      "--layers", "1", "--d-model", "16", "--heads", "2", "--batch-size", "4",
                                      "--train-length", "5"))
    assert header[:6] == ["encoding", "precision", "N", "buckets", "model-steps/s", "vs one at a time"]
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [("rope", "fp32", "1 at a time", ""), ("rope", "fp32", "2", "auto"),
                                                        ("rope", "fp32", "2", "1")]


def test_train_speed_prints_the_plain_port_and_each_encoding():
    _, header, rows = first_table(run("train_speed.py", "--encodings", "rope,alibi", "--steps", "1",
                                      "--train-length", "5", "--batch-size", "4", "--eval-length", "20",
                                      "--eval-samples", "2", "--eval-batch", "2", "--threads", "1"))
    assert "train steps/s" in header and "eval samples/s" in header
    assert rows[0][0].startswith("plain") and [r[0] for r in rows[1:]] == ["rope", "rope", "alibi", "alibi"]


def test_attention_speed_prints_the_baseline_and_each_method():
    caption, header, rows = first_table(run("attention_speed.py", "--lengths", "64", "--repeats", "1",
                                            "--threads", "1", "--methods", "rerope:window=16;yarn:factor=4"))
    assert caption.startswith("# device") and header[:3] == ["T", "method", "path"]
    assert {r[1] for r in rows} >= {"rerope:window=16", "yarn:factor=4"} and all(r[0] == "64" for r in rows)


def test_cli_help_prints_every_command_with_its_imports():
    caption, header, rows = first_table(run("cli_help.py", "--repeats", "1"))
    assert caption.startswith("CLI start") and header == ["command", "s", "x baseline", "modules", "heavy imports"]
    commands = [p for p in command_paths(build_parser()) if len(p) == 1]
    assert [r[0] for r in rows] == ["lengen --help"] + [f"lengen {p[0]} --help" for p in commands]
    assert {r[4] for r in rows} == {"-"}  # what tests/test_imports.py checks, as the table shows it
