"""Image-classifier training with torchvision, PyTorch's defaults throughout: ResNet-50
(``torchvision.models.resnet50(weights=None)``) in float32, batch 64 of random 224x224 images and
labels, cross-entropy, SGD with momentum 0.9 (foreach), NCHW memory format, ``cudnn.benchmark``
off. cuDNN's float32 convolutions may use TF32 by PyTorch's default. Optimizer marks only.

Fixes:

- ``channels_last``: model and images in ``torch.channels_last``: cuDNN's NHWC kernels without the
  layout transposes around them;
- ``bf16_autocast``: forward and loss under ``torch.autocast("cuda", torch.bfloat16)``;
- ``channels_last_bf16``: both;
- ``cudnn_benchmark``: ``torch.backends.cudnn.benchmark = True``: cuDNN times its algorithms for each
  shape once and keeps the fastest;
- ``compiled``: ``torch.compile(model)``: Inductor fuses the batch-norm and ReLU passes around the
  convolutions (what the elementwise rule proposes).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, main, need  # noqa: E402


def build(variant: str, setup: Setup) -> Step:
    """One training step of ``variant``."""
    models = need("torchvision.models", "torchvision")
    dev = setup.device
    batch, size = setup.pick((64, 224), (2, 64))
    torch.manual_seed(0)
    model = models.resnet50(weights=None).to(dev).train()
    last = variant in ("channels_last", "channels_last_bf16")
    autocast = variant in ("bf16_autocast", "channels_last_bf16")
    benchmark = variant == "cudnn_benchmark"
    fmt = torch.channels_last if last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    data = [(torch.randn(batch, 3, size, size, device=dev).contiguous(memory_format=fmt),
             torch.randint(0, 1000, (batch,), device=dev)) for _ in range(4)]
    batches = itertools.cycle(data)
    forward = torch.compile(model) if variant == "compiled" else model

    def step() -> torch.Tensor:
        torch.backends.cudnn.benchmark = benchmark
        x, y = next(batches)
        with torch.autocast(dev.type, torch.bfloat16, enabled=autocast):
            loss = loss_fn(forward(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


PROGRAM = Program(
    name="tv_resnet50_train",
    description="torchvision ResNet-50 training, float32, NCHW, batch 64, SGD momentum (PyTorch defaults)",
    variants=(
        Variant("as_written", "float32, NCHW, cudnn.benchmark off", samples=64),
        Variant("channels_last", "model and images in channels_last", ("channels_last",), samples=64),
        Variant("bf16_autocast", "torch.autocast(bfloat16)", ("precision",), samples=64),
        Variant("channels_last_bf16", "channels_last and bf16 autocast", ("channels_last", "precision"),
                samples=64),
        Variant("cudnn_benchmark", "torch.backends.cudnn.benchmark = True", ("below_roofline",), samples=64),
        Variant("compiled", "torch.compile(model)", ("unfused_elementwise",), samples=64),
    ),
    build=build,
    iterations=120,
    measure_iterations=15,
    warmup=10,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)
