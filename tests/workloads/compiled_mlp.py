"""Training of a mid-size MLP compiled with ``torch.compile`` (default mode): 4 x (Linear(512) +
ReLU), batch 64, SGD with momentum. Inductor fuses the elementwise work, but each step still
launches a few dozen small kernels through Python, which set the step time. Optimizer marks only.
Fixes: ``mode="reduce-overhead"`` (CUDA graphs of the compiled forward and backward; the optimizer
stays eager); the whole step (forward, backward, optimizer) captured in one CUDA graph.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, graphed_training, main


def build(variant: str, setup: Setup) -> Step:
    """One training iteration of ``variant``."""
    dev = setup.device
    width, batch = setup.pick((512, 64), (32, 8))
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(width, width), nn.ReLU())],
                          nn.Linear(width, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    data = [(torch.randn(batch, width, device=dev), torch.randint(0, 10, (batch,), device=dev)) for _ in range(4)]
    batches = itertools.cycle(data)
    if variant == "cuda_graph":
        def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return graphed_training(train_step, opt, data[0], batches)
    graphs = variant == "reduce_overhead"
    compiled = torch.compile(model, mode="reduce-overhead" if graphs else None)

    def step() -> None:
        x, y = next(batches)
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        loss = loss_fn(compiled(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    return step


PROGRAM = Program(
    name="compiled_mlp",
    description="torch.compile (default mode) MLP training, 4 x Linear(512), batch 64",
    variants=(
        Variant("as_written", "torch.compile(model)", samples=64),
        Variant("reduce_overhead", 'torch.compile(model, mode="reduce-overhead")', ("launch_bound",), samples=64,
                needs_cuda=True),
        Variant("cuda_graph", "the whole step (eager model, SGD) in one CUDA graph", ("launch_bound",), samples=64,
                needs_cuda=True),
    ),
    build=build,
    iterations=800,
    measure_iterations=200,
    warmup=10,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)
