"""A particle simulation advanced by 40 explicit sub-steps per iteration, each one launch of a small
Triton kernel (``v += dt * (-k x - c v); x += dt * v`` on 16k particles) that depends on the one
before. Written with Triton, not PyTorch operators: the host's launches through Triton's launcher
set the time. No step marks. Fix: the 40 sub-steps captured in one CUDA graph.
"""

from __future__ import annotations

import torch

from harness import Program, Setup, Step, Variant, capture, main

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU smoke test runs the same update with PyTorch operators
    triton = None

if triton is not None:
    @triton.jit
    def _advance(x_ptr, v_ptr, n, dt, k, c, BLOCK: tl.constexpr):  # noqa: ANN001, N803
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = i < n
        x = tl.load(x_ptr + i, mask=mask)
        v = tl.load(v_ptr + i, mask=mask)
        v = v + dt * (-k * x - c * v)
        x = x + dt * v
        tl.store(v_ptr + i, v, mask=mask)
        tl.store(x_ptr + i, x, mask=mask)


def advance(x: torch.Tensor, v: torch.Tensor, dt: float = 1e-3, k: float = 4.0, c: float = 0.1) -> None:
    """One sub-step, in place."""
    if x.is_cuda and triton is not None:
        n = x.numel()
        _advance[(triton.cdiv(n, 1024),)](x, v, n, dt, k, c, BLOCK=1024)
    else:
        v.add_(dt * (-k * x - c * v))
        x.add_(dt * v)


def build(variant: str, setup: Setup) -> Step:
    """One iteration (40 sub-steps) of ``variant``."""
    dev = setup.device
    n, substeps = setup.pick((16384, 40), (64, 4))
    torch.manual_seed(0)
    x = torch.randn(n, device=dev)
    v = torch.zeros(n, device=dev)

    def iteration() -> torch.Tensor:
        for _ in range(substeps):
            advance(x, v)
        return x

    if variant == "cuda_graph":
        return capture(iteration)
    return iteration


PROGRAM = Program(
    name="triton_substeps",
    description="40 dependent launches of a small Triton kernel per iteration (particle sub-steps)",
    variants=(
        Variant("as_written", "one Triton launch per sub-step from Python"),
        Variant("cuda_graph", "the 40 sub-steps in one CUDA graph", ("launch_bound",), needs_cuda=True),
    ),
    build=build,
    iterations=600,
    measure_iterations=100,
    warmup=10,
)

if __name__ == "__main__":
    main(PROGRAM)
