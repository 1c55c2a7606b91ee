"""RoPE's rotation of one tensor by half tables, the hot path of RoPE training:

    [x1, x2] -> [x1 c - sign x2 s, x2 c + sign x1 s]     (pair i: channels i and i + d/2)

x [..., d] (float32 or bf16), c and s [..., d/2] broadcasting against x's leading dims (float32;
the products are float32, stored in x's dtype). `sign` -1 rotates back (the backward).

On CUDA (triton installed) it is one Triton kernel (lengen.kernels.triton_rotary): each element
of x, c and s read once and the output written once. Eagerly it is four elementwise passes per
tensor (a mul and an addcmul_ per half, the first half read back), which on a GPU moved about
twice the bytes (benchmarks/step_traffic.py). The fused call is the custom operator
`lengen::rotate_halves`, so that torch (and the meta-device byte counter) sees one operator; on
the CPU the eager passes run as before, without the operator's dispatch cost.
"""

from __future__ import annotations

import torch

from lengen.kernels.flex_remap import triton_available


def rotated_like(x: torch.Tensor) -> torch.Tensor:
    """An empty output for x: [B, H, T, d] stored as [B, T, H, d] (the fused projection's layout,
    so that merging the heads later is a view), other ranks contiguous."""
    if x.dim() == 4:
        B, H, T, d = x.shape
        return torch.empty(B, T, H, d, dtype=x.dtype, device=x.device).transpose(1, 2)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def rotate_eager(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor, sign: float) -> torch.Tensor:
    h = x.shape[-1] // 2
    out = rotated_like(x)
    x1, x2, o1, o2 = x[..., :h], x[..., h:], out[..., :h], out[..., h:]
    torch.mul(x1, c, out=o1).addcmul_(x2, s, value=-sign)
    torch.mul(x2, c, out=o2).addcmul_(x1, s, value=sign)
    return out


@torch.library.custom_op("lengen::rotate_halves", mutates_args=())
def _rotate_halves(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor, sign: float) -> torch.Tensor:
    if x.is_cuda:
        from lengen.kernels.triton_rotary import rotate as one_pass  # imports triton: only where it runs

        return one_pass(x, c, s, sign, rotated_like(x))
    return rotate_eager(x, c, s, sign)


@_rotate_halves.register_fake
def _(x, c, s, sign):
    # also the meta device's kernel: the same layout as the real output
    return rotated_like(x)


def fused(device: torch.device) -> bool:
    """Whether `rotate` takes the one-pass kernel on this device (CUDA with triton)."""
    return device.type == "cuda" and triton_available()


def rotate(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor, sign: float) -> torch.Tensor:
    """The rotation above: one pass on CUDA, the eager passes elsewhere (and for ranks > 5)."""
    if x.dim() <= 5 and fused(x.device):
        return torch.ops.lengen.rotate_halves(x, c, s, float(sign))
    return rotate_eager(x, c, s, sign)
