"""Tables as the paper prints them: tasks grouped by level, the best cell of each row in bold, an
average row; as Markdown, as HTML and as CSV."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from lengen.reports.aggregate import task_label
from lengen.tasks import get_task

MISSING = "—"


def _level(task: str) -> str:
    try:
        return get_task(task).level
    except Exception:  # noqa: BLE001 - a task lengen does not know
        return ""


def cell_texts(table: pd.DataFrame, std: pd.DataFrame | None = None, fmt: str = "{:.1f}",
               bold_max: bool = True, average: bool = True) -> tuple[list[str], list[list[str]], list[list[bool]]]:
    """(header, rows of text, rows of bold flags) with Level and Task columns and the average row.
    Bold: the row's maximum (every cell that ties it)."""
    header = ["Level", "Task", *table.columns]
    rows, bolds = [], []
    last_level = None
    values = table.to_numpy(dtype=float)
    for i, task in enumerate(table.index):
        level = _level(task)
        row = [level if level != last_level else "", task_label(task)]
        last_level = level
        best = np.nanmax(values[i]) if np.isfinite(values[i]).any() else None
        flags = [False, False]
        for j, col in enumerate(table.columns):
            v = values[i, j]
            if np.isnan(v):
                row.append(MISSING)
                flags.append(False)
                continue
            text = fmt.format(v)
            if std is not None and pd.notna(std.iloc[i, j]):
                text += " ± " + fmt.format(std.iloc[i, j])
            row.append(text)
            flags.append(bold_max and best is not None and v == best)
        rows.append(row)
        bolds.append(flags)
    if average and len(table.index):
        avg = table.mean(axis=0, skipna=True)
        partial = table.isna().any(axis=0)
        row = ["", "Average"] + [MISSING if np.isnan(v) else fmt.format(v) + ("*" if partial[c] else "")
                                 for c, v in avg.items()]
        rows.append(row)
        bolds.append([False] * len(row))
    return header, rows, bolds


def markdown(table: pd.DataFrame, **kw) -> str:
    header, rows, bolds = cell_texts(table, **kw)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row, flags in zip(rows, bolds):
        out.append("| " + " | ".join(f"**{t}**" if b else t for t, b in zip(row, flags)) + " |")
    return "\n".join(out) + "\n"


def html_table(table: pd.DataFrame, table_id: str, **kw) -> str:
    header, rows, bolds = cell_texts(table, **kw)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for row, flags in zip(rows, bolds):
        cls = ' class="average"' if row[1] == "Average" else ' class="task"'
        cells = "".join(f"<td><b>{html.escape(t)}</b></td>" if b else f"<td>{html.escape(t)}</td>"
                        for t, b in zip(row, flags))
        body.append(f"<tr{cls}>{cells}</tr>")
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def simple_markdown(frame: pd.DataFrame, fmt: str = "{:.1f}") -> str:
    """Any small DataFrame (the comparison tables) as Markdown."""
    cols = list(frame.columns)
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in frame.iterrows():
        out.append("| " + " | ".join(fmt.format(v) if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(out) + "\n"
