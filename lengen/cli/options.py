"""Small parsing helpers shared by the commands."""

from __future__ import annotations

import argparse
import ast

from lengen.errors import LengenError


def parse_value(text: str):
    """'4' -> 4, '0.5' -> 0.5, 'true' -> True, 'beta' -> 'beta'."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_key_values(items: list[str] | None, flag: str) -> dict:
    """['init_L=40', 'mlp_depth=2'] -> {'init_L': 40, 'mlp_depth': 2}."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise LengenError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key.strip().replace("-", "_")] = parse_value(value.strip())
    return out


def parse_lengths(text: str) -> list[int]:
    """Token counts for --lengths: '4096' -> [4096], '4k' -> [4096], '2k,4k,8192' -> [2048, 4096, 8192]."""
    out = []
    for piece in (x.strip().lower() for x in text.split(",")):
        if not piece:
            continue
        try:
            n = int(float(piece[:-1]) * 1024) if piece.endswith("k") else int(piece)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a length: {piece!r} (use e.g. 4096 or 4k, "
                                             "several separated by commas or spaces)") from None
        out.append(n)
    if not out:
        raise argparse.ArgumentTypeError(f"no length in {text!r}")
    return out


def format_table(headers: list[str], rows: list[list], floatfmt: str = "{:.3f}") -> str:
    """A GitHub-markdown table, the shape papers' tables are copied into."""
    cells = [[floatfmt.format(c) if isinstance(c, float) else ("-" if c is None else str(c)) for c in r]
             for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = lambda vals: "| " + " | ".join(v.ljust(w) for v, w in zip(vals, widths)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in cells)])


def set_threads(n: int | None) -> None:
    """--threads: torch's CPU thread count (None keeps torch's choice)."""
    if n is None:
        return
    if n < 1:
        raise LengenError(f"--threads must be >= 1, got {n}")
    import torch

    torch.set_num_threads(n)
