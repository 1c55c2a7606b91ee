"""The Triton kernel of lengen.kernels.rotary: RoPE's half-split rotation in one pass.

Each program takes BLOCK_R rows of x (a row: the d channels of one leading index) and the
matching rows of c and s, and writes the rotated rows: x, c, s read once, the output written once,
whatever their strides (x is usually a strided view of the fused q/k/v projection, and the tables
are broadcast over heads, batch rows or models with stride 0). Up to four leading dims.

Triton is imported at the top of this module: import it only where it is used (CUDA, or the tests
under TRITON_INTERPRET=1).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

ELEMENTS_PER_PROGRAM = 4096


@triton.jit
def _rotate_kernel(X, C, S, O, rows, sign,
                   n1, n2, n3,
                   xs0, xs1, xs2, xs3, xsd,
                   cs0, cs1, cs2, cs3, csd,
                   ss0, ss1, ss2, ss3, ssd,
                   os0, os1, os2, os3, osd,
                   HALF: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr):
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    # the row's leading indices (i0, i1, i2, i3) from its flat index, the last fastest
    i3 = r % n3
    t = r // n3
    i2 = t % n2
    t = t // n2
    i1 = t % n1
    i0 = t // n1
    h = tl.arange(0, BLOCK_H)
    mask = (r < rows)[:, None] & (h < HALF)[None, :]
    xr = (i0 * xs0 + i1 * xs1 + i2 * xs2 + i3 * xs3)[:, None]
    cr = (i0 * cs0 + i1 * cs1 + i2 * cs2 + i3 * cs3)[:, None]
    sr = (i0 * ss0 + i1 * ss1 + i2 * ss2 + i3 * ss3)[:, None]
    orow = (i0 * os0 + i1 * os1 + i2 * os2 + i3 * os3)[:, None]
    x1 = tl.load(X + xr + h[None, :] * xsd, mask=mask).to(tl.float32)
    x2 = tl.load(X + xr + (h[None, :] + HALF) * xsd, mask=mask).to(tl.float32)
    c = tl.load(C + cr + h[None, :] * csd, mask=mask).to(tl.float32)
    s = tl.load(S + sr + h[None, :] * ssd, mask=mask).to(tl.float32)
    o1 = x1 * c - sign * (x2 * s)
    o2 = x2 * c + sign * (x1 * s)
    tl.store(O + orow + h[None, :] * osd, o1.to(O.dtype.element_ty), mask=mask)
    tl.store(O + orow + (h[None, :] + HALF) * osd, o2.to(O.dtype.element_ty), mask=mask)


def rotate(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor, sign: float,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """lengen.kernels.rotary's rotation of x [..., d] (at most 4 leading dims, d even) by c, s
    [..., d/2] broadcasting against x's leading dims, into `out` (x's shape, any strides; a new
    contiguous tensor by default)."""
    d = x.shape[-1]
    half = d // 2
    if d % 2 or x.dim() > 5 or x.dim() < 2:
        raise ValueError(f"rotate: x must be [..., d] with d even and 1-4 leading dims, got {tuple(x.shape)}")
    lead = tuple(x.shape[:-1])
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out
    c = c.expand(*lead, half)
    s = s.expand(*lead, half)
    pad = (1,) * (4 - len(lead))
    n0, n1, n2, n3 = pad + lead
    rows = n0 * n1 * n2 * n3
    if rows == 0:
        return out

    def strides(t):
        st = t.stride()
        return (0,) * len(pad) + tuple(st[:-1]) + (st[-1],)

    block_h = triton.next_power_of_2(half)
    block_r = max(1, min(triton.next_power_of_2(rows), ELEMENTS_PER_PROGRAM // block_h))
    grid = (triton.cdiv(rows, block_r),)
    _rotate_kernel[grid](x, c, s, out, rows, float(sign), n1, n2, n3,
                         *strides(x), *strides(c), *strides(s), *strides(out),
                         HALF=half, BLOCK_H=block_h, BLOCK_R=block_r)
    return out
