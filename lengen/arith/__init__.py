"""Arithmetic length generalization (McLeish et al. 2024, Abacus embeddings; Cho et al. 2024,
position coupling): addition, multi-operand addition and multiplication as decoder-LM tasks,
beside the CHE family (lengen.tasks). Adding a task = one module + one `ARITH_TASKS.add` line."""

from __future__ import annotations

from lengen.arith.addition import Addition
from lengen.arith.base import ArithTask
from lengen.arith.multi_addition import MultiAddition
from lengen.arith.multiplication import Multiplication
from lengen.registry import Registry

ARITH_TASKS: Registry[type[ArithTask]] = Registry("arithmetic task")
ARITH_TASKS.add("addition", Addition)
ARITH_TASKS.add("multi_addition", MultiAddition)
ARITH_TASKS.add("multiplication", Multiplication)


def get_arith_task(name: str, **options) -> ArithTask:
    """A task by name; `options` are its own (multiplication: b_digits; multi_addition: max_operands)."""
    return ARITH_TASKS.get(name)(**options)


__all__ = ["ARITH_TASKS", "ArithTask", "get_arith_task"]
