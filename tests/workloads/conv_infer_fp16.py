"""Inference of a stack of six 3x3 convolutions of 256 channels at 56x56, batch 64, float16,
channels_last, each followed by ReLU, under ``inference_mode``. A few launches of large
tensor-core convolutions per iteration: GPU-bound. No step marks. Nothing to fix; the candidate,
a CUDA graph of the forward, should measure no gain.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, capture, main


def build(variant: str, setup: Setup) -> Step:
    """One inference iteration of ``variant``."""
    dev = setup.device
    batch, size, width = setup.pick((64, 56, 256), (2, 8, 8))
    dtype = torch.float16 if setup.cuda else torch.float32
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Conv2d(width, width, 3, padding=1), nn.ReLU())])
    model = model.to(dev, dtype).to(memory_format=torch.channels_last).eval()
    images = [torch.randn(batch, width, size, size, device=dev, dtype=dtype).to(memory_format=torch.channels_last)
              for _ in range(2)]
    batches = itertools.cycle(images)

    if variant == "cuda_graph":
        with torch.inference_mode():
            static = images[0].clone()
            replay = capture(lambda: model(static))

        def graphed() -> torch.Tensor:
            with torch.inference_mode():
                static.copy_(next(batches))
                return replay()

        return graphed

    def step() -> torch.Tensor:
        with torch.inference_mode():
            return model(next(batches))

    return step


PROGRAM = Program(
    name="conv_infer_fp16",
    description="6 x conv3x3(256) + ReLU at 56x56, batch 64, fp16 channels_last inference: GPU-bound",
    variants=(
        Variant("as_written", "eager forward", samples=64),
        Variant("cuda_graph", "the forward in one CUDA graph", ("launch_bound",), samples=64, needs_cuda=True),
    ),
    build=build,
    iterations=300,
    measure_iterations=40,
    warmup=5,
    nothing_to_fix=True,
)

if __name__ == "__main__":
    main(PROGRAM)
