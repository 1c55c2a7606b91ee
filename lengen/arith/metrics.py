"""Exact match per heat-map cell: a problem counts only when every answer token and the EOS after
it are right (the papers' metric), and the cell's accuracy is the share of its problems that do."""

from __future__ import annotations

from collections import defaultdict


def exact_match(predicted: list[int], target: list[int]) -> bool:
    """Whether the decoded tokens begin with the whole target (answer + EOS); what follows EOS is
    never read."""
    return list(predicted[: len(target)]) == list(target)


def accuracy_by_cell(cells, correct) -> dict[tuple[int, int], dict]:
    """{cell: {"correct", "total", "accuracy"}} from each problem's cell and whether it was right,
    cells in sorted order."""
    hits, totals = defaultdict(int), defaultdict(int)
    for cell, ok in zip(cells, correct):
        cell = tuple(int(c) for c in cell)
        totals[cell] += 1
        hits[cell] += bool(ok)
    return {c: {"correct": hits[c], "total": totals[c], "accuracy": hits[c] / totals[c]} for c in sorted(totals)}


def accuracy_by_length(by_cell: dict, length_of) -> dict[int, float]:
    """Accuracy against length, pooled over the cells `length_of(cell)` gives a length (the
    task's: the diagonal (n, n) of a two-operand task, every operand count of multi-operand
    addition; None leaves a cell out)."""
    hits, totals = defaultdict(int), defaultdict(int)
    for cell, v in by_cell.items():
        n = length_of(cell)
        if n is not None:
            hits[n] += v["correct"]
            totals[n] += v["total"]
    return {n: hits[n] / totals[n] for n in sorted(totals)}
