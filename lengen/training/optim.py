"""Optimizer choices shared by the CHE and LM training loops."""

from __future__ import annotations

import torch


def fused_optimizer_ok(model: torch.nn.Module) -> bool:
    """Whether Adam/AdamW can run fused (torch >= 2.4 on CPU and CUDA, floating-point parameters).

    The CHE model has ~40 small parameter tensors; the fused step updates them in one kernel,
    ~3x cheaper than the default multi-tensor step (benchmarks/train_speed.py)."""
    params = list(model.parameters())
    return bool(params) and all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
