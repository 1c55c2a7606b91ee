"""`lengen tasks`: the 15 CHE tasks with their level, vocabularies and one decoded example."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("tasks", help="list the CHE tasks with an example each", description=__doc__)
    p.add_argument("--length", type=int, default=8, help="length of the examples (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the examples")
    p.set_defaults(func="lengen.cli.tasks:run")
