"""Image-classifier training with torchvision under automatic mixed precision, as PyTorch's AMP
recipe writes it: ResNet-50 (``weights=None``), batch 64 of random 224x224 images, forward and loss
under ``torch.autocast("cuda", torch.float16)``, ``torch.amp.GradScaler``, SGD with momentum 0.9;
NCHW memory format (the default). Optimizer marks only (the scaler calls ``optimizer.step``).

Fix: ``channels_last``: model and images in ``torch.channels_last``; half-precision convolutions
in NHWC are what cuDNN's tensor-core kernels take, so the NCHW program may pay for layout
transposes around each convolution.

``compiled``: ``torch.compile(model)``, the fix the fusion finding names (Inductor fuses the
batch-norm, ReLU and add passes between the convolutions); ``compiled_channels_last``: both.

``reduce_overhead``: ``torch.compile(model, mode="reduce-overhead")``, the fix the launch-bound
finding names (forward and backward replayed as CUDA graphs; the scaler's step stays eager). It
compiles too (fusion, and the channels_last layout Inductor takes), so the findings whose fix is
compiling count toward it as well.
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
    fmt = torch.channels_last if variant in ("channels_last", "compiled_channels_last") else torch.contiguous_format
    model = models.resnet50(weights=None).to(dev).train().to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler(dev.type)
    loss_fn = nn.CrossEntropyLoss()
    # float16 autocast on a CPU may be slow or unsupported for some operators: bfloat16 there
    dtype = torch.float16 if setup.cuda else torch.bfloat16
    data = [(torch.randn(batch, 3, size, size, device=dev).contiguous(memory_format=fmt),
             torch.randint(0, 1000, (batch,), device=dev)) for _ in range(4)]
    batches = itertools.cycle(data)

    forward = (torch.compile(model) if variant in ("compiled", "compiled_channels_last")
               else torch.compile(model, mode="reduce-overhead") if variant == "reduce_overhead" else model)

    def step() -> torch.Tensor:
        x, y = next(batches)
        with torch.autocast(dev.type, dtype):
            loss = loss_fn(forward(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return loss

    return step


PROGRAM = Program(
    name="tv_resnet50_amp",
    description="torchvision ResNet-50 training, AMP (fp16 autocast + GradScaler), NCHW, batch 64, SGD",
    variants=(
        Variant("as_written", "AMP, NCHW", samples=64),
        Variant("channels_last", "model and images in channels_last", ("channels_last",), samples=64),
        Variant("compiled", "torch.compile(model)", ("unfused_elementwise",), samples=64),
        Variant("compiled_channels_last", "torch.compile of the channels_last model",
                ("unfused_elementwise", "channels_last"), samples=64),
        Variant("reduce_overhead", 'torch.compile(model, mode="reduce-overhead")', ("launch_bound", "unfused_elementwise"),
                samples=64),
    ),
    build=build,
    iterations=200,
    measure_iterations=25,
    warmup=10,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)
