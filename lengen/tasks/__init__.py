"""The 15 Chomsky-hierarchy (CHE) tasks. Adding a task = one module + one `TASKS.add` line."""

from __future__ import annotations

from lengen.registry import Registry
from lengen.tasks.base import Batch, Task
from lengen.tasks.binary_addition import BinaryAddition
from lengen.tasks.binary_multiplication import BinaryMultiplication
from lengen.tasks.bucket_sort import BucketSort
from lengen.tasks.compute_sqrt import ComputeSqrt
from lengen.tasks.cycle_navigation import CycleNavigation
from lengen.tasks.duplicate_string import DuplicateString
from lengen.tasks.even_pairs import EvenPairs
from lengen.tasks.missing_duplicate_string import MissingDuplicateString
from lengen.tasks.modular_arithmetic import ModularArithmetic
from lengen.tasks.modular_arithmetic_brackets import ModularArithmeticBrackets
from lengen.tasks.odds_first import OddsFirst
from lengen.tasks.parity_check import ParityCheck
from lengen.tasks.reverse_string import ReverseString
from lengen.tasks.solve_equation import SolveEquation
from lengen.tasks.stack_manipulation import StackManipulation

TASKS: Registry[type[Task]] = Registry("task")
# Regular
TASKS.add("even_pairs", EvenPairs)
TASKS.add("modular_arithmetic", ModularArithmetic)
TASKS.add("parity_check", ParityCheck)
TASKS.add("cycle_navigation", CycleNavigation)
# Deterministic context-free
TASKS.add("stack_manipulation", StackManipulation)
TASKS.add("reverse_string", ReverseString)
TASKS.add("modular_arithmetic_brackets", ModularArithmeticBrackets)
TASKS.add("solve_equation", SolveEquation)
# Context-sensitive
TASKS.add("duplicate_string", DuplicateString)
TASKS.add("missing_duplicate_string", MissingDuplicateString)
TASKS.add("odds_first", OddsFirst)
TASKS.add("binary_addition", BinaryAddition)
TASKS.add("binary_multiplication", BinaryMultiplication)
TASKS.add("compute_sqrt", ComputeSqrt)
TASKS.add("bucket_sort", BucketSort)

TASK_NAMES: list[str] = TASKS.names()


def get_task(name: str) -> Task:
    """A fresh instance of the task `name`; an unknown name raises LengenError listing valid ones."""
    return TASKS.get(name)()


__all__ = ["TASKS", "TASK_NAMES", "Batch", "Task", "get_task"]
