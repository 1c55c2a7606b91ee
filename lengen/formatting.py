"""Small text formats every layer shares: option values written on a command line or in a method
spec (`4`, `0.5`, `1e-4`, `true`, `none`, `beta`), and GitHub-markdown tables (the shape papers'
tables are copied into)."""

from __future__ import annotations

import ast


def parse_value(text: str):
    """'4' -> 4, '0.5' -> 0.5, '1e-4' -> 0.0001, 'true' -> True, 'none' -> None, 'beta' -> 'beta'
    (Python literals otherwise: '[1, 2]', "'quoted'")."""
    text = text.strip()
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def count_noun(n: int, noun: str) -> str:
    """'1 thread', '2 threads', '0 threads': captions read as English."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def format_table(headers: list[str], rows: list[list], floatfmt: str = "{:.3f}") -> str:
    """A GitHub-markdown table, the shape papers' tables are copied into."""
    cells = [[floatfmt.format(c) if isinstance(c, float) else ("-" if c is None else str(c)) for c in r]
             for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = lambda vals: "| " + " | ".join(v.ljust(w) for v, w in zip(vals, widths)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in cells)])


def quoted_list(names) -> str:
    """Names for a message, each quoted and joined by " | ": labels hold commas ("rope, lr=0.001"),
    so a comma-joined list would not say where one ends."""
    return " | ".join(repr(str(name)) for name in names)
