"""A user's Triton kernel for ``triton_small_blocks.py``: ``y = x * alpha + bias`` over a flat
tensor, one program per ``BLOCK_SIZE`` elements. Imports Triton, so it is imported only where
Triton is installed; not a program itself."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def scale_shift_kernel(x_ptr, y_ptr, alpha, bias, n_elements, BLOCK_SIZE: tl.constexpr):  # noqa: N803, ANN001
    """``y = x * alpha + bias`` on the block of elements of this program."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x * alpha + bias, mask=mask)


def scale_shift(x: torch.Tensor, y: torch.Tensor, alpha: float, bias: float, block_size: int) -> torch.Tensor:
    """Launch the kernel over all of ``x`` (contiguous), writing ``y``; return ``y``."""
    n = x.numel()
    grid = (triton.cdiv(n, block_size),)
    scale_shift_kernel[grid](x, y, alpha, bias, n, BLOCK_SIZE=block_size)
    return y
