"""A small MLP trained with Adam: 8 x (Linear(256) + ReLU), batch 32, MSE loss.

Each iteration launches about 70 kernels of a few microseconds: the host's launches are the step
time. Fixes: the whole step captured in one CUDA graph (Adam with ``capturable=True``, static
inputs); Adam with ``fused=True`` (fewer launches); a 4x batch (same step time, 4x the samples).
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, graphed_training, main


def build(variant: str, setup: Setup) -> Step:
    """One training iteration of ``variant``."""
    dev = setup.device
    width = setup.pick(256, 32)
    batch = setup.pick(32, 4) * (4 if variant == "batch_4x" else 1)
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(width, width), nn.ReLU())]).to(dev)
    loss_fn = nn.MSELoss()
    data = [(torch.randn(batch, width, device=dev), torch.randn(batch, width, device=dev)) for _ in range(4)]
    batches = itertools.cycle(data)

    if variant == "cuda_graph":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)

        def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return graphed_training(train_step, opt, data[0], batches)

    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True if variant == "fused_adam" else None)

    def step() -> None:
        x, y = next(batches)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return step


PROGRAM = Program(
    name="mlp_adam",
    description="8 x Linear(256)+ReLU, batch 32, Adam, MSE: launch-bound training",
    variants=(
        Variant("as_written", "eager training step, Adam (foreach)", samples=32),
        Variant("cuda_graph", "whole step in one CUDA graph, Adam(capturable=True)", ("launch_bound",), samples=32,
                needs_cuda=True),
        Variant("fused_adam", "Adam(fused=True)", ("launch_bound",), samples=32),
        Variant("batch_4x", "batch 128", ("gpu_memory",), work_changing=True, samples=128),
    ),
    build=build,
    iterations=600,
    measure_iterations=200,
    warmup=20,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)
