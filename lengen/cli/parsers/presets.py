"""`lengen presets`: named defaults that reproduce the seeds' experiments."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("presets", help="list the presets of `lengen train --preset`", description=__doc__)
    p.set_defaults(func="lengen.cli.presets:run")
