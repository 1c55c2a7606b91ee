"""Optimizer choices shared by the CHE and LM training loops."""

from __future__ import annotations

import torch


def fused_optimizer_ok(model: torch.nn.Module) -> bool:
    """Whether Adam/AdamW can run fused (torch >= 2.4 on CPU and CUDA, floating-point parameters).

    The CHE model has ~40 small parameter tensors; the fused step updates them in one kernel,
    ~3x cheaper than the default multi-tensor step (benchmarks/train_speed.py)."""
    params = list(model.parameters())
    return bool(params) and all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)


ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # the CHE protocol's Adam (che_tasks.md)


def che_adam(model: torch.nn.Module, lr: float) -> torch.optim.Adam:
    """The Adam of a CHE run, fused where it can be; `train` and each member of a group use it."""
    return torch.optim.Adam(model.parameters(), lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS,
                            fused=fused_optimizer_ok(model))
