"""Inference of 4 self-attention blocks written by hand (``softmax(q @ k^T / sqrt(d)) @ v``),
batch 8, 16 heads, sequence 1024, head width 64, bfloat16. The 1024 x 1024 score matrices of each
head are written and read back by separate scale, softmax and matmul kernels. No step marks.
Fixes: ``F.scaled_dot_product_attention`` (a fused flash-attention kernel); ``torch.compile``.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn
from torch.nn import functional as F

from harness import Program, Setup, Step, Variant, main


class Attention(nn.Module):
    """Multi-head self-attention with a hand-written or fused score computation, and a residual."""

    def __init__(self, d: int, heads: int, fused: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.heads = heads
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.fused:
            a = F.scaled_dot_product_attention(q, k, v)
        else:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
            a = scores.softmax(-1) @ v
        return x + self.out(a.transpose(1, 2).reshape(b, s, d))


def build(variant: str, setup: Setup) -> Step:
    """One inference iteration of ``variant``."""
    dev = setup.device
    batch, seq, d, heads = setup.pick((8, 1024, 1024, 16), (2, 16, 32, 2))
    dtype = torch.bfloat16 if setup.cuda else torch.float32
    torch.manual_seed(0)
    model = nn.Sequential(*[Attention(d, heads, variant == "sdpa") for _ in range(4)]).to(dev, dtype).eval()
    run = torch.compile(model) if variant == "compiled" else model
    batches = itertools.cycle([torch.randn(batch, seq, d, device=dev, dtype=dtype) for _ in range(2)])

    def step() -> torch.Tensor:
        with torch.inference_mode():
            return run(next(batches))

    return step


PROGRAM = Program(
    name="naive_attention_bf16",
    description="4 hand-written attention blocks (softmax(qk^T)v), batch 8, 16 heads, seq 1024, bf16 inference",
    variants=(
        Variant("as_written", "scores, softmax and the product with v as separate operators", samples=8),
        Variant("sdpa", "F.scaled_dot_product_attention", ("fused_attention",), samples=8),
        Variant("compiled", "torch.compile(model)", ("unfused_elementwise",), samples=8),
    ),
    build=build,
    iterations=300,
    measure_iterations=40,
    warmup=5,
)

if __name__ == "__main__":
    main(PROGRAM)
