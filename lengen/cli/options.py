"""Helpers the command handlers share: flags into config options, --threads. (The parsers' shared
arguments are in lengen.cli.parsers.common.)"""

from __future__ import annotations


from lengen._threads import fix_threads
from lengen.errors import LengenError
from lengen.formatting import format_table, parse_value  # noqa: F401 - the commands import them from here
from lengen.options import parse_key_values  # noqa: F401 - the commands import it from here


#: options given as repeated KEY=VALUE flags (parse_key_values), by every command that has them
KEY_VALUE_FLAGS = {"pe_options": "--pe-option", "position_options": "--position-option",
                   "logit_scale_options": "--logit-scale-option"}


def options_from_args(args, table) -> dict:
    """The options named in `table` (option name -> config path) that the command line gave,
    KEY=VALUE lists parsed into dicts."""
    given = {k: v for k, v in vars(args).items() if k in table and v is not None}
    for key, flag in KEY_VALUE_FLAGS.items():
        if key in given:
            given[key] = parse_key_values(given[key], flag)
    return given


def set_threads(n: int | None) -> None:
    """--threads: torch's CPU thread count (None keeps torch's choice)."""
    if n is None:
        return
    if n < 1:
        raise LengenError(f"--threads must be >= 1, got {n}")
    fix_threads(n)  # the user's count: training does not lower it under load
