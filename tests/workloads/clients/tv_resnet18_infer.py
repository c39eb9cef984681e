"""Batch inference with torchvision: ResNet-18 (``weights=None``) in float16, ``eval()`` under
``torch.inference_mode()``, batch 256 of random 224x224 images in the default NCHW memory format.

Fixes:

- ``channels_last``: model and images in ``torch.channels_last`` (cuDNN's NHWC tensor-core kernels
  without layout transposes);
- ``compiled``: ``torch.compile(model)``: batch norms folded or fused with what follows, ReLUs and
  residual adds fused (fewer passes over the activations);
- ``compiled_channels_last``: both (does compilation alone already take the layout?).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, main, need  # noqa: E402


def build(variant: str, setup: Setup) -> Step:
    """One forward of ``variant``."""
    models = need("torchvision.models", "torchvision")
    dev = setup.device
    batch, size = setup.pick((256, 224), (2, 64))
    dtype = torch.float16 if setup.cuda else torch.bfloat16  # float16 convolutions are slow on a CPU
    torch.manual_seed(0)
    fmt = torch.channels_last if variant in ("channels_last", "compiled_channels_last") else torch.contiguous_format
    model = models.resnet18(weights=None).to(dev, dtype=dtype).eval().to(memory_format=fmt)
    if variant in ("compiled", "compiled_channels_last"):
        model = torch.compile(model)
    images = itertools.cycle([torch.randn(batch, 3, size, size, device=dev, dtype=dtype)
                              .contiguous(memory_format=fmt) for _ in range(2)])

    def step() -> torch.Tensor:
        with torch.inference_mode():
            return model(next(images))

    return step


PROGRAM = Program(
    name="tv_resnet18_infer",
    description="torchvision ResNet-18 inference, batch 256, float16, NCHW",
    variants=(
        Variant("as_written", "float16, NCHW, eager", samples=256),
        Variant("channels_last", "model and images in channels_last", ("channels_last",), samples=256),
        Variant("compiled", "torch.compile(model)", ("unfused_elementwise",), samples=256),
        Variant("compiled_channels_last", "torch.compile of the channels_last model",
                ("unfused_elementwise", "channels_last"), samples=256),
    ),
    build=build,
    iterations=400,
    measure_iterations=50,
    warmup=10,
)

if __name__ == "__main__":
    main(PROGRAM)
