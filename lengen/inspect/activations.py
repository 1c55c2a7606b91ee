"""Block outputs of one forward pass, and the 2-D PCA of the seed paper's Fig. 5/6: fit on the
activations at the training length, the longer length projected onto the same axes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lengen.inspect.hooks import forward_with_hooks


@torch.no_grad()
def block_outputs(model, inputs: torch.Tensor, output_length: int,
                  positions: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Run the model once in eval mode and return the output of every block (before a pre-norm
    model's final LayerNorm), each [B, T, d_model] float32 on the CPU."""
    outputs: list[torch.Tensor] = []

    def hook(module, args, output):
        outputs.append(output.detach().float().cpu())

    forward_with_hooks(model, getattr(model, "encoder", model).blocks, hook, inputs, output_length, positions)
    return outputs


@dataclass
class PCA:
    """A fitted principal-component projection."""

    mean: np.ndarray                      # [D], the mean of the fitted rows
    components: np.ndarray                # [k, D], unit principal directions, largest first
    explained_variance: np.ndarray        # [k], variance along each direction (ddof = 1)
    explained_variance_ratio: np.ndarray  # [k], that variance over the total variance

    def project(self, x) -> np.ndarray:
        """(x - mean) @ components.T: [N, D] -> [N, k]."""
        return (np.asarray(x, dtype=np.float64) - self.mean) @ self.components.T


def fit_pca(x, k: int = 2) -> PCA:
    """PCA of the rows of x [N, D]: centre on their mean, top-k right singular vectors (SVD in
    float64). Each direction's sign is fixed so its largest-magnitude entry is positive. When x has
    fewer than k independent directions (N or D < k), the missing ones are zero."""
    x = torch.as_tensor(np.asarray(x), dtype=torch.float64)
    if x.dim() != 2 or x.shape[0] < 1:
        raise ValueError(f"fit_pca needs a non-empty [N, D] matrix, got shape {tuple(x.shape)}")
    n, d = x.shape
    mean = x.mean(dim=0)
    _, s, vt = torch.linalg.svd(x - mean, full_matrices=False)
    r = min(k, s.shape[0])
    components = torch.zeros(k, d, dtype=torch.float64)
    components[:r] = vt[:r]
    signs = torch.sign(components.gather(1, components.abs().argmax(dim=1, keepdim=True)))
    components = components * torch.where(signs == 0, 1.0, signs)
    var_all = s**2 / max(n - 1, 1)
    var = torch.zeros(k, dtype=torch.float64)
    var[:r] = var_all[:r]
    total = var_all.sum()
    ratio = var / total if total > 0 else torch.zeros(k, dtype=torch.float64)
    return PCA(mean.numpy(), components.numpy(), var.numpy(), ratio.numpy())
