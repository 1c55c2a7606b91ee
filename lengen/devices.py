"""Devices and numeric precision for everything that trains or evaluates.

A device spec is "auto" (the first CUDA GPU when torch sees one, else the CPU), "cpu", "cuda" or
"cuda:N". A precision is one of

  fp32  float32 everywhere (the default; what every number in docs/ was measured with unless noted)
  tf32  float32 weights, matmuls in TensorFloat-32 on CUDA (Ampere or newer); on the CPU the same as fp32
  bf16  float32 weights and optimizer, the forward pass under torch.autocast(bfloat16)

Both live in the run configs (TrainConfig.device, LMConfig.device, ...), never in a global: a
process may train on the CPU and evaluate on a GPU. Models are always built on the CPU (the same
seed gives the same initial weights on every device) and then moved.
"""

from __future__ import annotations

import contextlib
import os
import re

import torch

from lengen.errors import LengenError, unknown_name

PRECISIONS = ("fp32", "tf32", "bf16")

_SPEC = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def resolve_device(spec: str | torch.device | None) -> torch.device:
    """The torch.device for a spec; LengenError (one line) when it names a GPU torch cannot see."""
    if isinstance(spec, torch.device):
        spec = str(spec)
    spec = (spec or "auto").strip().lower()
    if not _SPEC.match(spec):
        raise LengenError(f"unknown device {spec!r}; use auto, cpu, cuda or cuda:N")
    if spec == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise LengenError(f"device {spec!r} requested but torch sees no CUDA GPU "
                          f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); "
                          "use --device cpu")
    index = int(spec.split(":")[1]) if ":" in spec else 0
    count = torch.cuda.device_count()
    if index >= count:
        raise LengenError(f"device {spec!r} requested but torch sees {count} GPU(s) (cuda:0..cuda:{count - 1})")
    return torch.device("cuda", index)


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise LengenError(unknown_name("precision", precision, PRECISIONS))
    return precision


@contextlib.contextmanager
def precision_context(precision: str, device: torch.device):
    """The numeric mode for the forward pass (and, for tf32, the backward's matmuls). Restores
    torch's global TF32 flags on exit, so one run's choice never leaks into another."""
    check_precision(precision)
    device = torch.device(device)
    if precision == "bf16":
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            yield
        return
    if precision == "tf32" and device.type == "cuda":
        old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old
        return
    yield


def rng_state(device: torch.device) -> dict:
    """torch's CPU generator and, for a CUDA run, that GPU's generator (dropout draws on it)."""
    device = torch.device(device)
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def restore_rng_state(state: dict, device: torch.device) -> None:
    """Inverse of rng_state. A CUDA state is restored only on a CUDA device (a run moved from a
    GPU to the CPU continues with the CPU stream: numbers then differ within noise)."""
    device = torch.device(device)
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def to_device(device: torch.device, *tensors: torch.Tensor):
    """Move CPU tensors to `device` without waiting for the copy (a no-op on the CPU)."""
    device = torch.device(device)
    if device.type == "cpu":
        return tensors
    return tuple(t.to(device, non_blocking=True) for t in tensors)


def available_memory() -> int | None:
    """Bytes of main memory the system can give a new allocation now (Linux's MemAvailable: free
    plus reclaimable cache), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None
