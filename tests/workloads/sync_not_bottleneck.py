"""GPU-bound training that reads its loss with ``.item()`` every step: 4 x (Linear(8192) + ReLU) in
bfloat16, 4096 samples per batch, SGD with momentum; about 10 ms of tensor-core work per step.

The host waits at the ``.item()``, but the GPU is the bottleneck: after the wait it only misses
the few microseconds the host needs to launch the next step. Nothing to fix; the candidate,
keeping the loss on the GPU, should measure no gain.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, main


def build(variant: str, setup: Setup) -> Step:
    """One training iteration of ``variant``."""
    dev = setup.device
    width, batch = setup.pick((8192, 4096), (64, 16))
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(width, width), nn.ReLU())])
    model = model.to(dev, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    batches = itertools.cycle([torch.randn(batch, width, device=dev, dtype=torch.bfloat16) for _ in range(2)])
    losses: list[float] = []
    running = torch.zeros((), device=dev)

    def step() -> None:
        nonlocal running
        opt.zero_grad()
        loss = model(next(batches)).float().square().mean()
        loss.backward()
        opt.step()
        if variant == "no_item":
            running += loss.detach()
        else:
            losses.append(loss.item())

    return step


PROGRAM = Program(
    name="sync_not_bottleneck",
    description="GPU-bound bf16 training (4 x Linear(8192), batch 4096) with loss.item() each step",
    variants=(
        Variant("as_written", "loss.item() every step", samples=4096),
        Variant("no_item", "the loss summed on the GPU", ("host_sync",), samples=4096),
    ),
    build=build,
    iterations=80,
    measure_iterations=20,
    warmup=3,
    nothing_to_fix=True,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)
