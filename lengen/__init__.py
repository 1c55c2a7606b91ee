"""lengen: a PyTorch lab for Transformer length generalization.

Train on short sequences, evaluate on long ones: the Chomsky-hierarchy (CHE) tasks, a zoo of
positional encodings that all read positions from one tensor, position samplers, and
training-free extrapolation methods for RoPE language models.
"""

import sys

from lengen._openmp import choose_wait_policy

# before anything imports torch (and with it the OpenMP runtime, which reads the policy once);
# once torch is loaded, sampling the CPU could change nothing
OPENMP_WAIT = choose_wait_policy() if "torch" not in sys.modules else "default (torch was imported first)"

__version__ = "0.1.0"
