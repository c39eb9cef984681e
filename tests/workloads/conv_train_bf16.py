"""Training of a ResNet-style CNN in bfloat16 autocast with channels_last (stem, then residual
blocks of 64, 128 and 256 channels; batch 128 of 128x128 images; SGD with momentum): a step is
milliseconds of convolutions on the tensor cores, far longer than its launches. Optimizer marks
only. Nothing to fix; the candidates, SGD with ``fused=True`` and the whole step in one CUDA graph,
should measure little gain.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, graphed_training, main


class Residual(nn.Module):
    """Two 3x3 conv + batch norm, with a projected shortcut when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(h)) + self.short(x))


def build(variant: str, setup: Setup) -> Step:
    """One training iteration of ``variant``."""
    dev = setup.device
    batch, size = setup.pick((128, 128), (2, 16))
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
        Residual(64, 64, 1), Residual(64, 64, 1),
        Residual(64, 128, 2), Residual(128, 128, 1),
        Residual(128, 256, 2), Residual(256, 256, 1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 100),
    ).to(dev, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True if variant == "fused_sgd" else None)
    loss_fn = nn.CrossEntropyLoss()
    data = [(torch.randn(batch, 3, size, size, device=dev).contiguous(memory_format=torch.channels_last),
             torch.randint(0, 100, (batch,), device=dev)) for _ in range(2)]
    batches = itertools.cycle(data)

    if variant == "cuda_graph":
        def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            with torch.autocast(dev.type, torch.bfloat16):
                loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return graphed_training(train_step, opt, data[0], batches)

    def step() -> None:
        x, y = next(batches)
        with torch.autocast(dev.type, torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    return step


PROGRAM = Program(
    name="conv_train_bf16",
    description="ResNet-style CNN training, bf16 autocast, channels_last, batch 128 of 128x128",
    variants=(
        Variant("as_written", "eager training step, SGD (foreach)", samples=128),
        Variant("fused_sgd", "SGD(fused=True)", ("launch_bound",), samples=128),
        Variant("cuda_graph", "the whole step in one CUDA graph", ("launch_bound",), samples=128, needs_cuda=True),
    ),
    build=build,
    iterations=120,
    measure_iterations=20,
    warmup=5,
    nothing_to_fix=True,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)
