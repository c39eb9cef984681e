"""MLP training that reads the loss with ``.item()`` and finds the hard samples with
``torch.nonzero`` every iteration: 6 x (Linear(512) + ReLU), batch 64, Adam.

The kernels are tiny, so the host's launches are the step time and both synchronizations find
the GPU nearly done: removing them should gain little. Fixes: no synchronization (the loss and
the count of hard samples kept on the GPU); forward, backward and optimizer step captured in a
CUDA graph (the syncs stay); both.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, graphed_training, main

HARD = 1.5  # a sample whose loss is above this counts as hard


def build(variant: str, setup: Setup) -> Step:
    """One training iteration of ``variant``."""
    dev = setup.device
    width, batch = setup.pick((512, 64), (32, 8))
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(width, width), nn.ReLU())]).to(dev)
    graphed = variant in ("cuda_graph", "cuda_graph_no_syncs")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=graphed)
    data = [(torch.randn(batch, width, device=dev), torch.randn(batch, width, device=dev)) for _ in range(4)]
    batches = itertools.cycle(data)
    losses: list[float] = []
    hard_total = torch.zeros((), dtype=torch.long, device=dev)
    loss_total = torch.zeros((), device=dev)
    syncs = variant in ("as_written", "cuda_graph")

    def forward_backward(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        per_sample = (model(x) - y).square().mean(1)
        loss = per_sample.mean()
        loss.backward()
        opt.step()
        return loss, per_sample.detach()

    def bookkeeping(loss: torch.Tensor, per_sample: torch.Tensor) -> None:
        nonlocal hard_total, loss_total
        if syncs:
            losses.append(loss.item())
            hard = torch.nonzero(per_sample > HARD)
            hard_total += len(hard)
        else:
            loss_total += loss.detach()
            hard_total += (per_sample > HARD).sum()

    if graphed:
        replay = graphed_training(forward_backward, opt, data[0], batches)

        def step() -> None:
            bookkeeping(*replay())

        return step

    def step() -> None:
        x, y = next(batches)
        opt.zero_grad()
        bookkeeping(*forward_backward(x, y))

    return step


PROGRAM = Program(
    name="mlp_item_nonzero",
    description="6 x Linear(512) MLP training, batch 64, with loss.item() and torch.nonzero each step",
    variants=(
        Variant("as_written", "eager step, .item() and nonzero() every iteration", samples=64),
        Variant("no_syncs", "loss and hard-sample count kept on the GPU", ("host_sync",), samples=64),
        Variant("cuda_graph", "forward, backward and optimizer step in one CUDA graph; the syncs stay",
                ("launch_bound",), samples=64, needs_cuda=True),
        Variant("cuda_graph_no_syncs", "the CUDA graph and no syncs", ("launch_bound", "host_sync"), samples=64,
                needs_cuda=True),
    ),
    build=build,
    iterations=600,
    measure_iterations=200,
    warmup=20,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)
