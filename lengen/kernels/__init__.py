"""Fused CPU kernels. `attention` is scaled-dot-product attention with an additive bias and a
causal flag: a C++ kernel for small head dims on CPU (float32), torch's SDPA otherwise.
See lengen/kernels/small_attention.py and docs/performance.md."""

from lengen.kernels.small_attention import attention, available, build, is_enabled, sdpa, set_enabled

__all__ = ["attention", "available", "build", "is_enabled", "sdpa", "set_enabled"]
