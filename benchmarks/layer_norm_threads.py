"""Where a CHE run's numbers depend on the CPU thread count (docs/results/demo.md): torch's fused
LayerNorm backward sums the gain and bias gradients over the rows in a thread-count-dependent
order. Prints (1) one LayerNorm backward at 1 and 2 threads, gradient by gradient, and (2) the
seed paper's model's training step with torch's LayerNorm against one written out of elementwise
ops and per-row means (thread-count independent), alternating, in the same run.

    python benchmarks/layer_norm_threads.py                   # 2 threads, 5 rounds of 8 steps
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from lengen.formatting import count_noun, format_table
from lengen.models import ModelConfig
from lengen.che.config import TrainConfig
from lengen.che.loop import train_step
from lengen.training.optim import che_adam
from lengen.che.setup import build_run

TORCH_FORWARD = torch.nn.LayerNorm.forward


def written_out(self, x):
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + self.eps) * self.weight + self.bias


def gradient_differences(rows: int, width: int) -> list[list]:
    torch.manual_seed(0)
    x = torch.randn(rows, width, requires_grad=True)
    norm = torch.nn.LayerNorm(width)
    grads = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for t in (x, norm.weight, norm.bias):
            t.grad = None
        norm(x).backward(torch.ones(rows, width))
        grads[threads] = [t.grad.clone() for t in (x, norm.weight, norm.bias)]
    return [[name, f"{(a - b).abs().max().item():.3g}"]
            for name, a, b in zip(("input", "gain", "bias"), grads[1], grads[2])]


def step_seconds(rounds: int, steps: int, threads: int) -> dict[str, list[float]]:
    torch.set_num_threads(threads)
    cfg = TrainConfig(task="reverse_string", model=ModelConfig(pe="rope"), device="cpu")
    torch.manual_seed(0)
    parts = build_run(cfg)
    optimizer = che_adam(parts.model, cfg.lr)
    times: dict[str, list[float]] = {"torch LayerNorm": [], "written out": []}
    for _ in range(rounds):
        for name, forward in (("torch LayerNorm", TORCH_FORWARD), ("written out", written_out)):
            torch.nn.LayerNorm.forward = forward
            rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
            train_step(parts, cfg, optimizer, rng, gen, "cpu")  # warm-up
            start = time.perf_counter()
            for _ in range(steps):
                train_step(parts, cfg, optimizer, rng, gen, "cpu")
            times[name].append((time.perf_counter() - start) / steps)
    torch.nn.LayerNorm.forward = TORCH_FORWARD
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=8, help="timed steps per round and variant")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    print("LayerNorm backward on [2688, 64] (batch 64 x 42 tokens, d_model 64), max |1 thread - 2 threads|:")
    print(format_table(["gradient", "difference"], gradient_differences(2688, 64)))
    times = step_seconds(args.rounds, args.steps, args.threads)
    base = statistics.median(times["torch LayerNorm"])
    rows = [[name, f"{statistics.median(t) * 1000:.0f}", f"{min(t) * 1000:.0f}", f"{max(t) * 1000:.0f}",
             f"{statistics.median(t) / base:.2f}x"] for name, t in times.items()]
    print(f"\nreverse_string, the seed paper's model (rope), batch 128, {count_noun(args.threads, 'thread')}, "
          f"{args.rounds} alternating rounds of {args.steps} steps:")
    print(format_table(["LayerNorm", "ms/step median", "min", "max", "vs torch"], rows))


if __name__ == "__main__":
    main()
