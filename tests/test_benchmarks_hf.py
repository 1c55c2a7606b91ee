"""benchmarks/hf_forward_speed.py at toy size, as tests/test_benchmarks.py checks the other CPU
benchmarks: it runs against today's lengen.hf and the installed transformers (a Hugging Face test:
scripts/hf_compat.py runs it against other releases too) and prints the table docs render."""

import pytest

pytest.importorskip("transformers")

from test_benchmarks import first_table, run  # noqa: E402


def test_hf_forward_speed_prints_native_and_each_method():
    _, header, rows = first_table(run("hf_forward_speed.py", "--layers", "1", "--lengths", "64", "--repeats", "1",
                                      "--threads", "1", "--methods", "rerope:window=16"))
    assert header[0] == "T" and [r[1] for r in rows] == ["native", "rerope:window=16"]
