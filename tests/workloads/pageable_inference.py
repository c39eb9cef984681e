"""Inference over batches held in ordinary (pageable) host memory: each iteration copies a 32 MB
float32 batch (8192 x 1024) with ``.to('cuda')``, then runs five residual MLP blocks (1024 -> 8192
-> 1024, bfloat16). The copy is staged by the driver and the host waits for it, and no kernel runs
meanwhile. No step marks. Fix: batches in pinned memory, copied with ``non_blocking=True`` on a
side stream one batch ahead, so the copy of the next batch overlaps this one's compute.
"""

from __future__ import annotations

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, main


class Block(nn.Module):
    """Pre-norm residual MLP block."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def build(variant: str, setup: Setup) -> Step:
    """One inference iteration of ``variant``."""
    dev = setup.device
    rows, d, hidden = setup.pick((8192, 1024, 8192), (64, 32, 64))
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(d, hidden) for _ in range(5)], nn.Linear(d, 16)).to(dev, torch.bfloat16).eval()
    batches = [torch.randn(rows, d) for _ in range(4)]  # 32 MB each at full size
    i = 0

    if variant == "pinned_prefetch":
        batches = [b.pin_memory() for b in batches] if setup.cuda else batches
        copy_stream = torch.cuda.Stream() if setup.cuda else None

        def load(k: int) -> torch.Tensor:
            if copy_stream is None:
                return batches[k % len(batches)].to(dev)
            with torch.cuda.stream(copy_stream):
                return batches[k % len(batches)].to(dev, non_blocking=True)

        ahead = load(0)

        def step() -> torch.Tensor:
            nonlocal i, ahead
            if copy_stream is not None:
                torch.cuda.current_stream().wait_stream(copy_stream)
                ahead.record_stream(torch.cuda.current_stream())
            x, ahead = ahead, load(i + 1)
            i += 1
            with torch.inference_mode():
                return model(x.to(torch.bfloat16)).argmax(1)

        return step

    def step() -> torch.Tensor:
        nonlocal i
        x = batches[i % len(batches)].to(dev)
        i += 1
        with torch.inference_mode():
            return model(x.to(torch.bfloat16)).argmax(1)

    return step


PROGRAM = Program(
    name="pageable_inference",
    description="inference, 32 MB batch copied from pageable memory each iteration, then a bf16 MLP",
    variants=(
        Variant("as_written", "x = batch.to('cuda') from pageable memory", samples=8192),
        Variant("pinned_prefetch", "pinned batches, non_blocking copy one batch ahead on a side stream",
                ("pageable_copies", "sync_copies", "stream_overlap"), samples=8192),
    ),
    build=build,
    iterations=200,
    measure_iterations=50,
    warmup=5,
)

if __name__ == "__main__":
    main(PROGRAM)
