"""Fused CPU kernels. `attention` is scaled-dot-product attention with an additive bias and a
causal flag: a C++ kernel for small head dims on CPU (float32), torch's SDPA otherwise.
See lengen/kernels/small_attention.py, docs/engineering/performance.md (how it works) and
docs/results/speed.md (measured).

`flex_remap`: the remapping methods' attention as two FlexAttention passes merged by log-sum-exp
(used on CUDA; see lengen/kernels/flex_remap.py and docs/training_free.md); ahead of it on CUDA the
one-pass Triton kernel `triton_remap`. `rotary`: RoPE's rotation of q and k, one Triton pass on
CUDA (`triton_rotary`), the eager passes elsewhere. The Triton modules import triton: they are
imported only where they run."""

from lengen.kernels import flex_remap
from lengen.kernels.small_attention import attention, available, build, is_enabled, sdpa, set_enabled

__all__ = ["attention", "flex_remap", "available", "build", "is_enabled", "sdpa", "set_enabled"]
