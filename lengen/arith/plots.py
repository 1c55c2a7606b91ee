"""The arithmetic figures: the exact-match heat map over a task's cells (McLeish et al.'s figures)
and accuracy against length, with the training digits marked. matplotlib is imported on use."""

from __future__ import annotations

import numpy as np


def heatmap_figure(cells: dict, axes: tuple[str, str], train_digits: int, title: str):
    """cells {(i, j): accuracy in [0, 1]} -> a matplotlib figure (i down, j across, % in each cell
    when they fit)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted({i for i, _ in cells})
    cols = sorted({j for _, j in cells})
    grid = np.full((len(rows), len(cols)), np.nan)
    for (i, j), acc in cells.items():
        grid[rows.index(i), cols.index(j)] = 100 * acc
    size = max(3.0, 0.35 * max(len(rows), len(cols)) + 1.5)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(grid, origin="lower", vmin=0, vmax=100, cmap="viridis", aspect="auto",
                      extent=(cols[0] - 0.5, cols[-1] + 0.5, rows[0] - 0.5, rows[-1] + 0.5))
    if len(rows) * len(cols) <= 400:
        for (i, j), acc in cells.items():
            ax.text(j, i, f"{100 * acc:.0f}", ha="center", va="center", fontsize=7,
                    color="white" if acc < 0.6 else "black")
    ax.axhline(train_digits + 0.5, color="red", lw=1)
    if axes[1].startswith("digits"):
        ax.axvline(train_digits + 0.5, color="red", lw=1)
    ax.set_xlabel(axes[1])
    ax.set_ylabel(axes[0])
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="exact match (%)")
    fig.tight_layout()
    return fig


def close(fig) -> None:
    """Free a figure once it is saved (a report draws one per variant)."""
    import matplotlib.pyplot as plt

    plt.close(fig)


def length_figure(curves: dict, train_digits: int, title: str, xlabel: str = "digits"):
    """curves {label: (lengths, mean %, low %, high %)} -> accuracy against length, the t interval
    shaded where there is one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, (x, mean, low, high) in curves.items():
        ax.plot(x, mean, marker="o", ms=3, label=label)
        if low is not None and not np.all(np.isnan(low)):
            ax.fill_between(x, low, high, alpha=0.2)
    ax.axvline(train_digits + 0.5, color="grey", ls="--", lw=1)
    ax.set_ylim(-2, 102)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("exact match (%)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
