"""The one parser of option values (command-line --*-option and method specs) and the table format."""

import pytest

from lengen.formatting import format_table, parse_value


@pytest.mark.parametrize("text,value", [
    ("4", 4), (" 4 ", 4), ("0.5", 0.5), ("1e-4", 0.0001), ("-3", -3), ("true", True), ("False", False),
    ("none", None), ("null", None), ("beta", "beta"), (" beta ", "beta"), ("[1, 2]", [1, 2]),
])
def test_parse_value(text, value):
    got = parse_value(text)
    assert got == value and type(got) is type(value)


def test_method_specs_and_cli_options_parse_alike():
    from lengen.cli.options import parse_key_values

    assert parse_key_values(["factor=1e1", "attention_factor=none"], "--x") == {"factor": 10.0,
                                                                               "attention_factor": None}
    from lengen.extrapolation.compose import parse_spec

    assert parse_spec("yarn:factor=1e1,attention_factor=none") == [("yarn", {"factor": 10.0,
                                                                             "attention_factor": None})]


def test_format_table():
    assert format_table(["a", "bb"], [[1, 0.5], [None, "x"]]) == (
        "| a | bb    |\n|---|-------|\n| 1 | 0.500 |\n| - | x     |")


@pytest.mark.parametrize("n,text", [(0, "0 threads"), (1, "1 thread"), (2, "2 threads"), (16, "16 threads")])
def test_count_noun(n, text):
    from lengen.formatting import count_noun

    assert count_noun(n, "thread") == text
