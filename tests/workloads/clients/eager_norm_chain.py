"""Inference of a normalization-heavy residual model written in eager PyTorch, bfloat16: 12 blocks,
each ``x = x + gamma1 * gelu(linear(layer_norm(x)))`` then ``x = x + gamma2 * (h * sigmoid(h))`` with
``h = layer_norm(x)`` (layer scale, a gated activation), d 1024, batch 8 of 2048 tokens, under
``torch.inference_mode()``. Each block runs one matrix product and about eight elementwise and
normalization kernels, each a full pass over the activations in memory.

Fix: ``compiled``: ``torch.compile(model)``: Inductor fuses the chains of elementwise work between the
matrix products (fewer passes over memory).
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


class Block(nn.Module):
    """A residual block: LayerNorm, Linear, GELU, layer scale; LayerNorm, gated SiLU-like, layer scale."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, d)
        self.gamma1 = nn.Parameter(torch.full((d,), 0.1))
        self.norm2 = nn.LayerNorm(d)
        self.gamma2 = nn.Parameter(torch.full((d,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Two residual updates of ``x``."""
        x = x + self.gamma1 * F.gelu(self.fc(self.norm1(x)))
        h = self.norm2(x)
        return x + self.gamma2 * (h * torch.sigmoid(h))


def build(variant: str, setup: Setup) -> Step:
    """One forward of ``variant``."""
    dev = setup.device
    d, blocks, batch, seq = setup.pick((1024, 12, 8, 2048), (64, 2, 2, 32))
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(d) for _ in range(blocks)]).to(dev, dtype=torch.bfloat16).eval()
    if variant == "compiled":
        model = torch.compile(model)
    inputs = itertools.cycle([torch.randn(batch, seq, d, device=dev, dtype=torch.bfloat16) for _ in range(2)])

    def step() -> torch.Tensor:
        with torch.inference_mode():
            return model(next(inputs))

    return step


PROGRAM = Program(
    name="eager_norm_chain",
    description="12 residual blocks of LayerNorm + Linear + GELU + gated activation, d 1024, 16k tokens, bf16, eager",
    variants=(
        Variant("as_written", "eager, one kernel per operation", samples=8),
        Variant("compiled", "torch.compile(model)", ("unfused_elementwise",), samples=8),
    ),
    build=build,
    iterations=1500,
    measure_iterations=100,
    warmup=10,
)

if __name__ == "__main__":
    main(PROGRAM)
