"""Accuracy against length, the training range shaded: the seed paper's figure."""

from __future__ import annotations

from pathlib import Path

from lengen import io


def plot_accuracy(curves: dict[str, dict[int, float]], train_length: int, path: Path, title: str = "",
                  chance: float | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    for label, acc in curves.items():
        lengths = sorted(acc)
        ax.plot(lengths, [acc[n] for n in lengths], label=label, lw=1.6)
    ax.axvspan(0.5, train_length + 0.5, color="0.85", zorder=0, label=f"training lengths 1-{train_length}")
    if chance is not None:
        ax.axhline(chance, color="0.4", ls=":", lw=1, label="chance")
    ax.set_xlabel("sequence length")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.legend(loc="lower left", fontsize=8)
    ax.grid(alpha=0.3)
    io.save_figure(Path(path), fig)
    plt.close(fig)
