"""Training of a model of 48 small residual blocks (Linear(64) + LayerNorm + GELU), batch 16,
with ``Adam(foreach=False)``: the optimizer updates its 192 parameter tensors one at a time, about
ten tiny kernels each, so the optimizer's launches are most of the step. Optimizer marks only.
Fixes: ``Adam(fused=True)``; the whole step captured in one CUDA graph.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, graphed_training, main


class Block(nn.Module):
    """x + GELU(LayerNorm(Linear(x)))."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + nn.functional.gelu(self.norm(self.lin(x)))


def build(variant: str, setup: Setup) -> Step:
    """One training iteration of ``variant``."""
    dev = setup.device
    width, batch, depth = setup.pick((64, 16, 48), (8, 4, 3))
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(width) for _ in range(depth)]).to(dev)
    loss_fn = nn.MSELoss()
    data = [(torch.randn(batch, width, device=dev), torch.randn(batch, width, device=dev)) for _ in range(4)]
    batches = itertools.cycle(data)

    if variant == "cuda_graph":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True, foreach=False)

        def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return graphed_training(train_step, opt, data[0], batches)

    opt = (torch.optim.Adam(model.parameters(), lr=1e-3, fused=True) if variant == "fused_adam"
           else torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False))

    def step() -> None:
        x, y = next(batches)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return step


PROGRAM = Program(
    name="adam_foreach_off",
    description="48 residual blocks of Linear(64)+LayerNorm+GELU, batch 16, Adam(foreach=False): optimizer launches",
    variants=(
        Variant("as_written", "Adam(foreach=False)", samples=16),
        Variant("fused_adam", "Adam(fused=True)", ("launch_bound",), samples=16),
        Variant("cuda_graph", "whole step in one CUDA graph, Adam(capturable=True)", ("launch_bound",), samples=16,
                needs_cuda=True),
    ),
    build=build,
    iterations=300,
    measure_iterations=40,
    warmup=10,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)
