"""Training of an MLP under ``torch.compile(model)`` whose forward reads a value on the host: after
each of its 4 blocks (Linear 1024 + LayerNorm + GELU, residual) it checks
``if h.abs().max().item() > 1e4`` and rescales the activations when they blow up, a guard written
the way one writes it in eager code. Each ``.item()`` splits the compiled forward into separate
graphs (a graph break) and waits for the GPU to finish the work queued so far. Batch 256, bf16
autocast, AdamW; optimizer marks only.

Fixes:

- ``no_item``: the guard on the GPU, ``h = torch.where(h.abs().amax() > 1e4, h / h.abs().amax(), h)``:
  one graph, no wait;
- ``reduce_overhead``: ``torch.compile(model, mode="reduce-overhead")``: each graph between the breaks
  replayed as a CUDA graph (the guard as written);
- ``graphed_step``: what the launch-bound finding asks for, written by hand: the guard on the GPU (a
  graph cannot hold a read of a GPU value on the host), the model run as it is (not compiled), and the
  whole step (forward, backward, AdamW with ``capturable=True``) captured once with
  ``torch.cuda.graph`` and replayed, each batch copied into the captured inputs.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, main  # noqa: E402

LIMIT = 1e4


class Guarded(nn.Module):
    """Residual blocks with a blow-up guard after each: on the host (``.item()``) or on the GPU."""

    def __init__(self, d: int, blocks: int, on_host: bool) -> None:
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(d, d) for _ in range(blocks))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(blocks))
        self.head = nn.Linear(d, 10)
        self.on_host = on_host

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """The blocks, each followed by the guard, then the head."""
        for fc, norm in zip(self.fcs, self.norms):
            h = h + F.gelu(norm(fc(h)))
            if self.on_host:
                peak = h.abs().max().item()
                if peak > LIMIT:
                    h = h / peak
            else:
                peak = h.abs().amax()
                h = torch.where(peak > LIMIT, h / peak, h)
        return self.head(h)


def build(variant: str, setup: Setup) -> Step:
    """One training step of ``variant``."""
    dev = setup.device
    d, blocks, batch = setup.pick((1024, 4, 256), (32, 2, 4))
    torch.manual_seed(0)
    model = Guarded(d, blocks, on_host=variant not in ("no_item", "graphed_step")).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=variant == "graphed_step")
    loss_fn = nn.CrossEntropyLoss()
    batches = itertools.cycle([(torch.randn(batch, d, device=dev), torch.randint(0, 10, (batch,), device=dev))
                               for _ in range(4)])
    if variant == "graphed_step":
        return _graphed_step(model, opt, loss_fn, batches, dev)
    compiled = torch.compile(model, mode="reduce-overhead" if variant == "reduce_overhead" else "default")

    def step() -> torch.Tensor:
        x, y = next(batches)
        with torch.autocast(dev.type, torch.bfloat16):
            loss = loss_fn(compiled(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


def _graphed_step(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: nn.Module,
                  batches: "itertools.cycle[tuple[torch.Tensor, torch.Tensor]]", dev: torch.device) -> Step:
    """The training step captured once in a CUDA graph (the recipe of PyTorch's CUDA-graph notes for a
    whole network): warmed up on a side stream, the gradients set to None before the capture so that
    the captured backward makes them, then replayed with each batch copied into the captured inputs."""
    x0, y0 = next(batches)
    static_x, static_y = x0.clone(), y0.clone()

    def once() -> torch.Tensor:
        with torch.autocast(dev.type, torch.bfloat16, cache_enabled=False):  # no cache inside a capture
            loss = loss_fn(model(static_x), static_y)
        loss.backward()
        opt.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            once()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        captured = once()

    def step() -> torch.Tensor:
        x, y = next(batches)
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        return captured

    return step


PROGRAM = Program(
    name="compiled_graph_break",
    description="torch.compile MLP (4 x Linear 1024) with a .item() guard per block: graph breaks and syncs",
    variants=(
        Variant("as_written", "if h.abs().max().item() > 1e4: ... after each block", samples=256),
        Variant("no_item", "the guard with torch.where on the GPU", ("host_sync",), samples=256),
        Variant("reduce_overhead", 'torch.compile(model, mode="reduce-overhead")', ("launch_bound",), samples=256,
                needs_cuda=True),
        Variant("graphed_step", "the guard on the GPU and the whole step captured in one CUDA graph by hand",
                ("launch_bound",), samples=256, needs_cuda=True),
    ),
    build=build,
    iterations=1500,
    measure_iterations=100,
    warmup=20,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)
