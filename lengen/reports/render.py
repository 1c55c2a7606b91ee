"""Tables of texts as Markdown and HTML (every report's), and the seed paper's tables as it prints
them: tasks grouped by level, the best cell of each row in bold, an average row."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from lengen.reports.che_aggregate import task_label
from lengen.tasks import get_task

MISSING = "—"


def _level(task: str) -> str:
    try:
        return get_task(task).level
    except Exception:  # noqa: BLE001 - a task lengen does not know
        return ""


def cell_texts(table: pd.DataFrame, std: pd.DataFrame | None = None, fmt: str = "{:.1f}",
               bold_max: bool = True, average: bool = True,
               interval: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> tuple[list[str], list[list[str]], list[list[bool]]]:
    """(header, rows of text, rows of bold flags) with Level and Task columns and the average row.
    Bold: the row's maximum (every cell that ties it). `interval`: (low, high) frames, shown as
    [low, high] after the cell."""
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
            if interval is not None and pd.notna(interval[0].iloc[i, j]):
                text += f" [{fmt.format(interval[0].iloc[i, j])}, {fmt.format(interval[1].iloc[i, j])}]"
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


def md_escape(text: str) -> str:
    """A table cell's text with Markdown's `|` and `*` escaped (labels such as `RoPE, PoSE` and
    the `*` of a cell with fewer runs than planned)."""
    return text.replace("|", "\\|").replace("*", "\\*")


def markdown_rows(header: list[str], rows: list[list[str]], bolds: list[list[bool]] | None = None,
                  escape=str) -> str:
    """A Markdown table of texts, `bolds` marking the cells in bold; `escape` applies to the
    cells (not the header)."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row, flags in zip(rows, bolds or [[False] * len(header)] * len(rows)):
        out.append("| " + " | ".join(f"**{escape(t)}**" if b else escape(t) for t, b in zip(row, flags)) + " |")
    return "\n".join(out) + "\n"


def html_rows(header: list[str], rows: list[list[str]], bolds: list[list[bool]], table_id: str,
              row_class=lambda row: "") -> str:
    """An HTML table of texts, `bolds` marking the cells in bold, `row_class(row)` naming a
    row's class ("": none)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for row, flags in zip(rows, bolds):
        cls = row_class(row)
        attr = f' class="{cls}"' if cls else ""
        cells = "".join(f"<td><b>{html.escape(t)}</b></td>" if b else f"<td>{html.escape(t)}</td>"
                        for t, b in zip(row, flags))
        body.append(f"<tr{attr}>{cells}</tr>")
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def markdown(table: pd.DataFrame, **kw) -> str:
    return markdown_rows(*cell_texts(table, **kw))


def html_table(table: pd.DataFrame, table_id: str, **kw) -> str:
    return html_rows(*cell_texts(table, **kw), table_id, lambda row: "average" if row[1] == "Average" else "task")


def simple_markdown(frame: pd.DataFrame, fmt: str = "{:.1f}") -> str:
    """Any small DataFrame (the comparison tables) as Markdown."""
    rows = [[fmt.format(v) if isinstance(v, float) else str(v) for v in r] for _, r in frame.iterrows()]
    return markdown_rows(list(frame.columns), rows)
