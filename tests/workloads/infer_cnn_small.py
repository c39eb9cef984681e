"""Inference of a small CNN under ``torch.inference_mode``: six conv + batch norm + ReLU blocks, a
pooled linear head, batch 8 of 64x64 images. Each kernel runs a few microseconds, so the host's
launches set the pace. No step marks. Fix: the forward captured in a CUDA graph and replayed.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, capture, main


def block(cin: int, cout: int, stride: int) -> nn.Sequential:
    """Conv 3x3, batch norm, ReLU."""
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


def build(variant: str, setup: Setup) -> Step:
    """One inference iteration of ``variant``."""
    dev = setup.device
    batch, size = setup.pick((8, 64), (2, 16))
    torch.manual_seed(0)
    widths = [3, 32, 32, 64, 64, 128, 128]
    model = nn.Sequential(
        *[block(cin, cout, 2 if i % 2 else 1) for i, (cin, cout) in enumerate(zip(widths, widths[1:]))],
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(widths[-1], 10),
    ).to(dev).eval()
    images = itertools.cycle([torch.randn(batch, 3, size, size, device=dev) for _ in range(4)])

    if variant == "cuda_graph":
        with torch.inference_mode():
            static_in = torch.zeros(batch, 3, size, size, device=dev)
            replay = capture(lambda: model(static_in).argmax(1))

        def step() -> torch.Tensor:
            with torch.inference_mode():
                static_in.copy_(next(images))
                return replay()

        return step

    def step() -> torch.Tensor:
        with torch.inference_mode():
            return model(next(images)).argmax(1)

    return step


PROGRAM = Program(
    name="infer_cnn_small",
    description="small CNN inference (6 conv+bn+relu, batch 8, 64x64) under inference_mode",
    variants=(
        Variant("as_written", "eager forward", samples=8),
        Variant("cuda_graph", "the forward in a CUDA graph", ("launch_bound",), samples=8, needs_cuda=True),
    ),
    build=build,
    iterations=1500,
    measure_iterations=500,
    warmup=20,
)

if __name__ == "__main__":
    main(PROGRAM)
