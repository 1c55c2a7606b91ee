"""Look inside one trained CHE model (`lengen inspect`): the attention maps of every layer at the
training length and at a longer one, and a 2-D PCA of every block's output fitted at the training
length with the longer length projected onto the same axes (the seed paper's Fig. 5/6).

    insp = open_run("runs/rev", length=80)          # checks everything before any work
    maps = attention_maps(insp.model, *insp.sample(80, batch=1, seed=0))
    written = inspect_run("runs/rev")               # the figures and the JSON; see docs/inspect.md
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lengen import io
from lengen.devices import available_memory, resolve_device
from lengen.encodings import ENCODINGS
from lengen.encodings.base import PositionalEncoding
from lengen.errors import LengenError
from lengen.inspect.activations import PCA, block_outputs, fit_pca
from lengen.inspect.attention import attention_maps, attention_modules, head_summaries
from lengen.inspect.plots import plot_activations, plot_attention
from lengen.models.config import model_label
from lengen.positions import evaluation_sampler
from lengen.che.config import TrainConfig
from lengen.che.evaluation import length_generator
from lengen.training.run_dir import RunDir
from lengen.che.loop import load_trained
from lengen.che.setup import RunParts, total_length


@dataclass
class Inspection:
    """A trained run loaded for inspection: its config, task and model (eval mode, on `device`)."""

    run: RunDir
    cfg: TrainConfig
    parts: RunParts
    device: torch.device
    length: int  # the longer length L

    @property
    def model(self):
        return self.parts.model

    def sample(self, length: int, batch: int, seed: int):
        """(inputs [batch, length'], output_length, positions [1|batch, T]) on the model's device:
        task inputs and test-mode positions drawn from independent streams per (seed, length)."""
        task = self.parts.task
        rng, gen = length_generator(seed, length)
        inputs = task.sample(batch, length, rng).inputs
        pos = evaluation_sampler(self.parts.test_mode, self.cfg.model.max_position)(total_length(task, length), gen)
        return inputs.to(self.device), task.output_length(length), pos.to(self.device)


def open_run(run_dir, length: int | None = None, device: str | None = None) -> Inspection:
    """Load the checkpoint of `run_dir` for inspection at its training length N and at `length`
    (default 2 N). Raises LengenError before loading anything heavy: not a run directory, a
    length < 1, a length the model's positions cannot serve (build_run's check), no checkpoint."""
    run = RunDir(run_dir)
    cfg = TrainConfig.from_dict(run.read_config(), where=str(run.path))
    if cfg.model.architecture != "transformer":
        raise LengenError(f"{run.path} is a {cfg.model.architecture} run: lengen inspect shows a Transformer's "
                          "attention maps and activations, and a recurrent model has neither attention nor positions")
    if device is not None:
        cfg.device = device
    dev = resolve_device(cfg.device)
    length = 2 * cfg.train_length if length is None else int(length)
    if length < 1:
        raise LengenError(f"--length must be >= 1, got {length}")
    parts = load_trained(run, cfg, max_length=max(length, cfg.train_length))
    parts.model.to(dev).eval()
    return Inspection(run=run, cfg=cfg, parts=parts, device=dev, length=length)


#: float32 T x T maps the attention figures hold at their peak, beyond the maps themselves
#: (layers x heads): one per layer for the two head summaries, and ~20 while matplotlib draws
#: (float64 and RGBA copies). Fitted to peak RSS of `lengen inspect --attention` on the CPU
#: (T = 2000-4000; 1-4 layers, 1-4 heads: 24-30 maps measured, this gives 26-30).
PER_LAYER_MAPS, DRAWING_MAPS = 2, 20


def memory_estimate(cfg: TrainConfig, tokens: int, attention: bool, activations: bool, samples: int) -> int:
    """Bytes `inspect_run` needs at `tokens` tokens a sequence (the longer length's): the
    attention maps of every layer and head, T x T float32, and what drawing them copies; the
    block outputs of `samples` sequences for the PCA (float32, its float64 copy and projection),
    and the feed-forward's activations of one block; an encoding with an additive bias adds its
    [heads, T, T] bias twice (measured: ALiBi), one that computes it from q and k (CoPE) twice per
    sequence. The fused kernel itself keeps no T x T matrix (measured: RoPE, T = 16,000)."""
    m = cfg.model
    need = 0
    if attention:
        need += 4 * tokens**2 * (m.num_layers * m.num_heads + PER_LAYER_MAPS * m.num_layers + DRAWING_MAPS)
    if activations:
        need += samples * tokens * (m.num_layers * m.d_model * (4 + 8 + 8) + 4 * m.d_ff)
        encodings = [ENCODINGS.get(name) for name in dict.fromkeys(m.layer_pe or [m.pe])]
        if any(e.qk_bias is not PositionalEncoding.qk_bias for e in encodings):
            need += 2 * 4 * samples * m.num_heads * tokens**2
        elif any(e.bias is not PositionalEncoding.bias for e in encodings):
            need += 2 * 4 * m.num_heads * tokens**2
    return need


def check_memory(cfg: TrainConfig, task, length: int, attention: bool, activations: bool, samples: int,
                 available: int | None) -> None:
    """LengenError when the estimate at `length` exceeds `available` bytes (None: unknown, no
    check): the length, the estimate, and the largest length whose estimate fits."""
    def need(n: int) -> int:
        return memory_estimate(cfg, total_length(task, n), attention, activations, samples)

    if available is None or need(length) <= available:
        return
    lo, hi = 0, length  # need(lo) fits (0: nothing), need(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if need(mid) <= available else (lo, mid)
    fits = f"the largest length that fits is {lo}" if lo >= 1 else "no length fits"
    raise LengenError(f"--length {length} needs about {need(length) / 1e9:,.1f} GB of memory for "
                      f"{' and '.join(w for w, on in (('the attention maps', attention), ('the activations', activations)) if on)} "
                      f"({total_length(task, length):,} tokens), {available / 1e9:,.1f} GB are available; {fits}")


def activation_pca(insp: Inspection, samples: int = 32, seed: int = 0) -> list[dict]:
    """Per layer: the PCA (`pca`) fitted on the block outputs at the training length N (every token
    of `samples` sequences), the projections `train` [samples * T_N, 2] and `long`
    [samples * T_L, 2] (length L onto the same axes), the token index of every row
    (`train_index`, `long_index`) and the explained-variance ratios `ratio`."""
    N, L = insp.cfg.train_length, insp.length
    train = block_outputs(insp.model, *insp.sample(N, samples, seed))
    long = block_outputs(insp.model, *insp.sample(L, samples, seed))
    out = []
    for a, b in zip(train, long):
        xa, xb = a.reshape(-1, a.shape[-1]).numpy(), b.reshape(-1, b.shape[-1]).numpy()
        pca = fit_pca(xa, 2)
        out.append({
            "pca": pca, "train": pca.project(xa), "long": pca.project(xb),
            "train_index": np.tile(np.arange(a.shape[1]), a.shape[0]),
            "long_index": np.tile(np.arange(b.shape[1]), b.shape[0]),
            "ratio": pca.explained_variance_ratio.tolist(),
        })
    return out


def command_line(run_dir, attention: bool, activations: bool, length: int, seed: int, samples: int,
                 out=None, device: str | None = None) -> str:
    """The `lengen inspect` command that reproduces a set of figures (defaults spelled out)."""
    parts = ["lengen", "inspect", str(run_dir)]
    parts += ["--attention"] if attention else []
    parts += ["--activations"] if activations else []
    parts += ["--length", str(length), "--seed", str(seed), "--samples", str(samples)]
    parts += ["--out", str(out)] if out is not None else []
    parts += ["--device", device] if device is not None else []
    return shlex.join(parts)


def inspect_run(run_dir, attention: bool = True, activations: bool = True, length: int | None = None,
                out=None, seed: int = 0, samples: int = 32, device: str | None = None) -> list[Path]:
    """Write the figures (and the PCA's JSON) into `out` (default: the run directory); returns the
    paths written. Every check runs before any work."""
    if not (attention or activations):
        raise LengenError("nothing to inspect: ask for attention, activations or both")
    if samples < 1:
        raise LengenError(f"--samples must be >= 1, got {samples}")
    if seed < 0:
        raise LengenError(f"--seed must be >= 0, got {seed}")
    out_dir = Path(out) if out is not None else Path(run_dir)
    if RunDir(run_dir).exists:  # (else open_run says it is no run directory) an unwritable out: before the work
        io.check_writable(out_dir)
    insp = open_run(run_dir, length=length, device=device)
    cfg, N, L = insp.cfg, insp.cfg.train_length, insp.length
    check_memory(cfg, insp.parts.task, L, attention, activations, samples, available_memory())
    caption = "$ " + command_line(run_dir, attention, activations, L, seed, samples, out, device)
    about = f"{cfg.task}  {model_label(cfg.model)}  positions={cfg.positions} (test: {insp.parts.test_mode})"
    written = []
    if attention:
        for tag, n in (("N", N), ("L", L)):
            inputs, out_len, pos = insp.sample(n, 1, seed)
            maps = [m[0] for m in attention_maps(insp.model, inputs, out_len, pos)]
            path = out_dir / f"inspect_attention_{tag}{n}.png"
            T = inputs.shape[1] + out_len
            plot_attention(maps, inputs.shape[1], path,
                           f"{about}\nattention at length {n} ({T} tokens, one sequence)", caption)
            written.append(path)
    if activations:
        layers = activation_pca(insp, samples, seed)
        path = out_dir / "inspect_activations.png"
        plot_activations(layers, N, L, path,
                         f"{about}\nblock outputs: PCA fitted at length {N}, length {L} projected "
                         f"({samples} sequences each)", caption)
        record = {
            "run": str(insp.run.path), "task": cfg.task, "pe": cfg.model.pe, "label": model_label(cfg.model),
            "positions": cfg.positions,
            "test_positions": insp.parts.test_mode, "train_length": N, "length": L,
            "samples": samples, "seed": seed, "fitted_on": f"length {N}, every token",
            "layers": [{"layer": i + 1, "explained_variance_ratio": d["ratio"],
                        "explained_variance": d["pca"].explained_variance.tolist()}
                       for i, d in enumerate(layers)],
            "command": caption[2:],
        }
        json_path = out_dir / "inspect_activations.json"
        io.write_json(json_path, record)
        written += [path, json_path]
    return written


__all__ = ["PCA", "Inspection", "activation_pca", "attention_maps", "attention_modules", "block_outputs",
           "command_line", "fit_pca", "head_summaries", "inspect_run", "open_run"]
