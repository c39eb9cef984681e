"""Four bfloat16 8192 x 8192 x 8192 matrix products back to back per iteration: about 7 ms of tensor-
core work for four launches. No step marks. Nothing to fix; the candidate, a CUDA graph of the four
products, should measure no gain.
"""

from __future__ import annotations

import torch

from harness import Program, Setup, Step, Variant, capture, main


def build(variant: str, setup: Setup) -> Step:
    """One iteration of ``variant``."""
    dev = setup.device
    n = setup.pick(8192, 64)
    torch.manual_seed(0)
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    weights = [torch.randn(n, n, device=dev, dtype=torch.bfloat16) / n**0.5 for _ in range(4)]

    def forward() -> torch.Tensor:
        h = x
        for w in weights:
            h = h @ w
        return h

    if variant == "cuda_graph":
        replay = capture(forward)
        return replay
    return forward


PROGRAM = Program(
    name="big_gemms_bf16",
    description="4 bf16 8192^3 matmuls per iteration: GPU-bound on tensor cores",
    variants=(
        Variant("as_written", "four matmuls launched from Python"),
        Variant("cuda_graph", "the four matmuls in one CUDA graph", ("launch_bound",), needs_cuda=True),
    ),
    build=build,
    iterations=120,
    measure_iterations=20,
    warmup=3,
    nothing_to_fix=True,
)

if __name__ == "__main__":
    main(PROGRAM)
