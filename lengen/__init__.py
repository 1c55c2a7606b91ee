"""lengen: a PyTorch lab for Transformer length generalization.

Train on short sequences, evaluate on long ones: the Chomsky-hierarchy (CHE) tasks, a zoo of
positional encodings that all read positions from one tensor, position samplers, and
training-free extrapolation methods for RoPE language models.
"""

import os

# OpenMP threads that spin-wait for a core another process holds turn every parallel region into
# a wait: on a 2-core machine beside one CPU-bound job, training ran ~2.3x slower with spinning
# (benchmarks/shared_cpu.py, docs/performance.md). Passive waiting costs little on an idle machine.
# It must be set before torch loads its OpenMP runtime, so it applies when lengen is imported
# first (the `lengen` command always is); OMP_WAIT_POLICY=ACTIVE in the environment still wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
