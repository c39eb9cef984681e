"""Causal self-attention inference written with ``F.scaled_dot_product_attention`` and an explicit
additive mask: a stack of 8 attention layers (query/key/value projection, attention, output
projection, residual add; d 1024, 16 heads of 64) in bfloat16 over batch 8 of 2048 positions,
under ``torch.inference_mode()``. The causal mask is a (2048, 2048) tensor of zeros and ``-inf``
above the diagonal, passed as ``attn_mask``: with a mask tensor, PyTorch cannot pick the
FlashAttention kernel, and the kernel it picks reads the mask and computes every block of scores,
the masked half included.

Fix: ``is_causal``: ``is_causal=True`` instead of the mask: FlashAttention, which skips the blocks
above the diagonal.
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


class Attention(nn.Module):
    """One attention layer with its projections and the residual add."""

    def __init__(self, d: int, heads: int, is_causal: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.heads = heads
        self.is_causal = is_causal

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Attend causally: through ``mask``, or with ``is_causal=True``."""
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=2))
        if self.is_causal:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return x + self.out(y.transpose(1, 2).reshape(b, t, d))


def build(variant: str, setup: Setup) -> Step:
    """One forward of ``variant``."""
    dev = setup.device
    layers, d, heads, batch, seq = setup.pick((8, 1024, 16, 8, 2048), (2, 64, 4, 2, 64))
    torch.manual_seed(0)
    model = nn.ModuleList(Attention(d, heads, variant == "is_causal") for _ in range(layers))
    model = model.to(dev, dtype=torch.bfloat16).eval()
    mask = torch.full((seq, seq), float("-inf"), device=dev, dtype=torch.bfloat16).triu(1)
    inputs = itertools.cycle([torch.randn(batch, seq, d, device=dev, dtype=torch.bfloat16) for _ in range(2)])

    def step() -> torch.Tensor:
        with torch.inference_mode():
            x = next(inputs)
            for layer in model:
                x = layer(x, mask)
            return x

    return step


PROGRAM = Program(
    name="sdpa_explicit_mask",
    description="8 causal attention layers via F.scaled_dot_product_attention with an additive mask tensor, "
                "bf16, batch 8, 16 heads x 64, seq 2048",
    variants=(
        Variant("as_written", "attn_mask = causal additive mask tensor", samples=8),
        Variant("is_causal", "is_causal=True, no mask tensor", ("sdpa_backend",), samples=8),
    ),
    build=build,
    iterations=600,
    measure_iterations=50,
    warmup=10,
)

if __name__ == "__main__":
    main(PROGRAM)
