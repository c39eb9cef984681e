"""A custom recurrent cell (no library equivalent: ``h = tanh(LayerNorm(x_t W + h U)) * gate``) stepped
over 48 time steps in Python, batch 16, width 256, inference. Each time step launches about ten
small kernels, each waiting on the previous one, so the host's launches set the time. No step
marks. Fixes: the whole sequence captured in one CUDA graph; ``torch.compile`` of the cell
(fewer, fused kernels per time step).
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, capture, main


class Cell(nn.Module):
    """One recurrent step: two projections, layer norm, tanh and a sigmoid gate."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.w = nn.Linear(width, width)
        self.u = nn.Linear(width, width, bias=False)
        self.norm = nn.LayerNorm(width)
        self.gate = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.norm(self.w(x) + self.u(h))) * torch.sigmoid(self.gate) + h * 0.5


def build(variant: str, setup: Setup) -> Step:
    """One inference iteration (a whole sequence) of ``variant``."""
    dev = setup.device
    batch, width, steps = setup.pick((16, 256, 48), (2, 16, 4))
    torch.manual_seed(0)
    cell = Cell(width).to(dev).eval()
    run_cell = torch.compile(cell) if variant == "compiled" else cell
    sequences = [torch.randn(steps, batch, width, device=dev) for _ in range(4)]
    inputs = itertools.cycle(sequences)

    def sequence(xs: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(batch, width, device=dev)
        for t in range(steps):
            h = run_cell(xs[t], h)
        return h

    if variant == "cuda_graph":
        with torch.no_grad():
            static = sequences[0].clone()
            replay = capture(lambda: sequence(static))

        def graphed() -> torch.Tensor:
            static.copy_(next(inputs))
            return replay()

        return graphed

    def step() -> torch.Tensor:
        with torch.no_grad():
            return sequence(next(inputs))

    return step


PROGRAM = Program(
    name="custom_rnn_loop",
    description="custom recurrent cell stepped 48 times in Python, batch 16, width 256, inference",
    variants=(
        Variant("as_written", "eager cell, one time step at a time", samples=16),
        Variant("cuda_graph", "the whole sequence in one CUDA graph", ("launch_bound",), samples=16, needs_cuda=True),
        Variant("compiled", "torch.compile of the cell", ("unfused_elementwise",), samples=16),
    ),
    build=build,
    iterations=500,
    measure_iterations=100,
    warmup=10,
)

if __name__ == "__main__":
    main(PROGRAM)
