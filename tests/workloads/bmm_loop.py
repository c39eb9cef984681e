"""64 same-shape matrix products, (512x512) @ (512x64) in float32, in a Python loop, then stacked
and summed: each product is a few microseconds of GPU work on a handful of SMs, and each costs a
launch from Python. No optimizer and no step marks. Fix: one ``torch.bmm`` over the stacked operands.
"""

from __future__ import annotations

import torch

from harness import Program, Setup, Step, Variant, main


def build(variant: str, setup: Setup) -> Step:
    """One iteration of ``variant``."""
    dev = setup.device
    n, m, k = setup.pick((64, 512, 64), (8, 32, 8))
    torch.manual_seed(0)
    a = torch.randn(n, m, m, device=dev) / m**0.5
    b = torch.randn(n, m, k, device=dev)

    if variant == "bmm":
        def step() -> torch.Tensor:
            return torch.bmm(a, b).sum(0)
    else:
        def step() -> torch.Tensor:
            outs = [a[i] @ b[i] for i in range(n)]
            return torch.stack(outs).sum(0)

    return step


PROGRAM = Program(
    name="bmm_loop",
    description="64 float32 (512x512)@(512x64) matmuls in a Python loop, then stack + sum",
    variants=(
        Variant("as_written", "a Python loop of 64 matmuls"),
        Variant("bmm", "one torch.bmm over the stacked operands", ("small_gemms",)),
    ),
    build=build,
    iterations=500,
    measure_iterations=200,
)

if __name__ == "__main__":
    main(PROGRAM)
