"""A user-written Triton kernel (``triton_kernels.py``: ``y = x * alpha + bias``, the tutorial's
vector-add pattern) with a small ``BLOCK_SIZE`` of 128, launched from a Python loop over 256 separate
float32 tensors of 64K elements each (per-parameter or per-sample buffers). Each launch moves 512 KB
in a few microseconds of GPU time, and Triton's launcher in Python takes longer than that, so the
launches may set the pace.

Fixes:

- ``one_launch``: the tensors are views into one flat buffer, and one launch (``BLOCK_SIZE`` 1024)
  covers all of them;
- ``big_block``: the same loop of launches with ``BLOCK_SIZE`` 1024 (fewer, larger programs per
  launch; still 256 launches).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, gpu_only, main, need  # noqa: E402

TENSORS, SIZE = 256, 64 * 1024


def build(variant: str, setup: Setup) -> Step:
    """One iteration of ``variant``: every tensor scaled and shifted once."""
    gpu_only(setup, "Triton")
    need("triton")
    from triton_kernels import scale_shift

    torch.manual_seed(0)
    dev = setup.device
    if variant == "one_launch":
        flat_x = torch.randn(TENSORS * SIZE, device=dev)
        flat_y = torch.empty_like(flat_x)

        def step() -> torch.Tensor:
            return scale_shift(flat_x, flat_y, 0.5, 1.0, 1024)

        return step
    xs = [torch.randn(SIZE, device=dev) for _ in range(TENSORS)]
    ys = [torch.empty_like(x) for x in xs]
    block = 1024 if variant == "big_block" else 128

    def step() -> torch.Tensor:
        for x, y in zip(xs, ys):
            scale_shift(x, y, 0.5, 1.0, block)
        return ys[-1]

    return step


PROGRAM = Program(
    name="triton_small_blocks",
    description="a Triton scale-and-shift kernel, BLOCK_SIZE 128, launched in a loop over 256 tensors of 64K",
    variants=(
        Variant("as_written", "256 launches, BLOCK_SIZE 128"),
        Variant("one_launch", "one launch over one flat buffer, BLOCK_SIZE 1024", ("launch_bound",)),
        Variant("big_block", "256 launches, BLOCK_SIZE 1024", ("below_roofline",)),
    ),
    build=build,
    iterations=1500,
    measure_iterations=100,
    warmup=10,
)

if __name__ == "__main__":
    main(PROGRAM)
