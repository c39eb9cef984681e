"""Inference of a 6-layer MLP (width 4096, batch 4096, bfloat16) compiled with
``torch.compile(mode="reduce-overhead")``: each iteration replays CUDA graphs of large tensor-core
matmuls, so the GPU is the bottleneck. No step marks. Nothing to fix; the candidate, the same
model compiled without CUDA graphs, is slower or equal.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, main


def build(variant: str, setup: Setup) -> Step:
    """One inference iteration of ``variant``."""
    dev = setup.device
    width, batch = setup.pick((4096, 4096), (32, 8))
    dtype = torch.bfloat16 if setup.cuda else torch.float32
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(width, width), nn.GELU())]).to(dev, dtype).eval()
    mode = "reduce-overhead" if variant == "as_written" and setup.cuda else None
    compiled = torch.compile(model, mode=mode)
    batches = itertools.cycle([torch.randn(batch, width, device=dev, dtype=dtype) for _ in range(2)])

    def step() -> torch.Tensor:
        with torch.inference_mode():
            return compiled(next(batches))

    return step


PROGRAM = Program(
    name="compiled_graphs_infer",
    description='torch.compile(mode="reduce-overhead") bf16 MLP inference, 6 x Linear(4096), batch 4096: GPU-bound',
    variants=(
        Variant("as_written", 'torch.compile(model, mode="reduce-overhead")', samples=4096),
        Variant("no_graphs", "torch.compile(model) without CUDA graphs", ("launch_bound",), samples=4096),
    ),
    build=build,
    iterations=400,
    measure_iterations=40,
    warmup=10,
    nothing_to_fix=True,
)

if __name__ == "__main__":
    main(PROGRAM)
