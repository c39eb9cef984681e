"""Inference of a 4-layer transformer encoder (d 1024, 16 heads, feed-forward 4096; batch 8 of 512
tokens) in float32 with TF32 off, as PyTorch's matmul default has it: the matrix products run on
the CUDA cores. No step marks. Fixes: TF32 on; bfloat16 autocast.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, main


def build(variant: str, setup: Setup) -> Step:
    """One inference iteration of ``variant``."""
    dev = setup.device
    d, heads, ff, batch, seq = setup.pick((1024, 16, 4096, 8, 512), (64, 4, 128, 2, 16))
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).to(dev).eval()
    inputs = itertools.cycle([torch.randn(batch, seq, d, device=dev) for _ in range(2)])
    tf32 = variant == "tf32"
    autocast = variant == "bf16_autocast"

    def step() -> torch.Tensor:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        with torch.inference_mode(), torch.autocast(dev.type, torch.bfloat16, enabled=autocast):
            return model(next(inputs)).mean(1)

    return step


PROGRAM = Program(
    name="infer_transformer_fp32",
    description="4-layer transformer encoder inference (d 1024, seq 512, batch 8), float32, TF32 off",
    variants=(
        Variant("as_written", "float32, allow_tf32 = False", samples=8),
        Variant("tf32", "allow_tf32 = True", ("no_tensor_cores",), samples=8),
        Variant("bf16_autocast", "torch.autocast(bfloat16)", ("no_tensor_cores",), samples=8),
    ),
    build=build,
    iterations=70,
    measure_iterations=15,
    warmup=3,
)

if __name__ == "__main__":
    main(PROGRAM)
