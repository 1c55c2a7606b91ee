"""The two `lengen inspect` figures. Every figure carries, at the bottom, the command that made it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from lengen import io
from lengen.inspect.attention import head_summaries


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, caption: str) -> None:
    fig.text(0.0, 0.0, caption, ha="left", va="top", fontsize=7, family="monospace")
    io.save_figure(Path(path), fig)
    _pyplot().close(fig)


def plot_attention(maps: list, input_length: int, path: Path, title: str, caption: str) -> None:
    """maps: one [H, T, T] probability tensor per layer. Rows = layers; left: the mean over heads,
    right: the element-wise max over heads. Dashed lines separate the input tokens from the
    output (EMPTY) slots."""
    plt = _pyplot()
    layers = len(maps)
    T = maps[0].shape[-1]
    side = min(4.2, max(2.6, T / 12))
    fig, axes = plt.subplots(layers, 2, figsize=(2 * side + 1.6, side * layers + 0.6), squeeze=False,
                             layout="constrained")
    for i, probs in enumerate(maps):
        probs = probs.float()
        mean, peak = head_summaries(probs)
        panels = ((mean, f"layer {i + 1}: mean over {probs.shape[0]} heads"),
                  (peak, f"layer {i + 1}: max over heads"))
        for ax, (m, label) in zip(axes[i], panels):
            im = ax.imshow(m.numpy(), cmap="viridis", vmin=0.0, interpolation="nearest", aspect="equal")
            if 0 < input_length < T:
                for line in (ax.axhline, ax.axvline):
                    line(input_length - 0.5, color="white", lw=0.8, ls="--")
            ax.set_title(label, fontsize=9)
            ax.set_xlabel("key (token index)", fontsize=8)
            ax.set_ylabel("query (token index)", fontsize=8)
            ax.tick_params(labelsize=7)
            fig.colorbar(im, ax=ax, shrink=0.8).ax.tick_params(labelsize=7)
    fig.suptitle(title, fontsize=10)
    _save(fig, path, caption)


def plot_activations(layers: list[dict], train_length: int, length: int, path: Path, title: str,
                     caption: str) -> None:
    """layers: per layer a dict with `train` [N, 2] and `long` [M, 2] projections, their token
    indices `train_index` / `long_index`, and `ratio` (explained-variance ratios of the two
    components). One panel per layer; dots = the training length (where the PCA was fitted),
    crosses = the longer length projected onto the same axes; colour = token index."""
    plt = _pyplot()
    from matplotlib.colors import Normalize
    from matplotlib.lines import Line2D

    n = len(layers)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.0 * cols + 1.0, 3.6 * rows + 0.6), squeeze=False,
                             layout="constrained")
    top = max(int(np.max(d[key], initial=0)) for d in layers for key in ("train_index", "long_index"))
    norm = Normalize(vmin=0, vmax=max(top, 1))
    cmap = "viridis"
    sc = None
    for i, d in enumerate(layers):
        ax = axes[i // cols][i % cols]
        ax.scatter(d["long"][:, 0], d["long"][:, 1], c=d["long_index"], cmap=cmap, norm=norm, marker="x",
                   s=10, linewidths=0.6, alpha=0.55)
        sc = ax.scatter(d["train"][:, 0], d["train"][:, 1], c=d["train_index"], cmap=cmap, norm=norm,
                        marker="o", s=9, edgecolors="none", alpha=0.8)
        r1, r2 = d["ratio"]
        ax.set_title(f"layer {i + 1}", fontsize=9)
        ax.set_xlabel(f"PC1 ({r1:.0%} of variance at length {train_length})", fontsize=8)
        ax.set_ylabel(f"PC2 ({r2:.0%})", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].axis("off")
    handles = [Line2D([], [], ls="", marker="o", color="0.3", label=f"length {train_length} (PCA fit)"),
               Line2D([], [], ls="", marker="x", color="0.3", label=f"length {length} (projected)")]
    axes[0][0].legend(handles=handles, fontsize=7, loc="best")
    cbar = fig.colorbar(sc, ax=axes, shrink=0.6)
    cbar.set_label("token index", fontsize=8)
    cbar.ax.tick_params(labelsize=7)
    fig.suptitle(title, fontsize=10)
    _save(fig, path, caption)
