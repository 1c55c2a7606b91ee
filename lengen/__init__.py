"""lengen: a PyTorch lab for Transformer length generalization.

Train on short sequences, evaluate on long ones: the Chomsky-hierarchy (CHE) tasks, a zoo of
positional encodings that all read positions from one tensor, position samplers, and
training-free extrapolation methods for RoPE language models.
"""

from lengen._openmp import choose_wait_policy

# before anything imports torch (and with it the OpenMP runtime, which reads this once)
OPENMP_WAIT = choose_wait_policy()

__version__ = "0.1.0"
