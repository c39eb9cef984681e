"""A chain of twelve elementwise operations on a 64 M-element float32 tensor (256 MB) per
iteration: each kernel streams the tensor through DRAM at close to full bandwidth, twelve times
over. No step marks. Fix: ``torch.compile`` of the chain (one fused kernel, one pass).
"""

from __future__ import annotations

import torch

from harness import Program, Setup, Step, Variant, main


def chain(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """A normalization, an activation and a soft clamp, one operation at a time."""
    h = x * scale
    h = h + shift
    h = torch.nn.functional.gelu(h)
    h = h * 0.5
    h = h + 1.0
    h = torch.sin(h)
    h = h * h
    h = torch.exp(-h)
    h = h - 0.25
    h = torch.tanh(h)
    h = h * 3.0
    return torch.clamp(h, -1.0, 1.0)


def build(variant: str, setup: Setup) -> Step:
    """One iteration of ``variant``."""
    dev = setup.device
    n = setup.pick(64 * 2**20, 4096)
    torch.manual_seed(0)
    x = torch.randn(n, device=dev)
    scale, shift = torch.rand((), device=dev), torch.rand((), device=dev)
    fn = torch.compile(chain) if variant == "compiled" else chain
    return lambda: fn(x, scale, shift)


PROGRAM = Program(
    name="elementwise_chain",
    description="12 elementwise ops on a 256 MB float32 tensor per iteration (memory-bound)",
    variants=(
        Variant("as_written", "one kernel per operation"),
        Variant("compiled", "torch.compile(chain): one fused kernel", ("unfused_elementwise",)),
    ),
    build=build,
    iterations=300,
    measure_iterations=50,
    warmup=5,
)

if __name__ == "__main__":
    main(PROGRAM)
