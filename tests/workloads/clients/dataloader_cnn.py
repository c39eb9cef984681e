"""Training of a small CNN fed by a ``DataLoader`` whose ``Dataset`` does real CPU work per sample,
as image pipelines do: each 3x64x64 image is made from its index with NumPy (a synthetic decode),
then augmented on the host (random crop to 56x56 with reflection padding, horizontal flip,
brightness and contrast jitter, per-channel normalization) and turned into a tensor. The loader
runs with ``num_workers=0``, the default, so the training loop prepares every batch itself (batch
32, shuffled) while the GPU waits; the model (four conv + batch norm + ReLU stages, pooling, a
linear head; SGD with momentum, float32) takes a few milliseconds per step. Optimizer marks only.

Fix: ``workers``: ``num_workers=4, pin_memory=True, persistent_workers=True`` and
``non_blocking=True`` copies: batches prepared in worker processes while the GPU trains.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, main  # noqa: E402

BATCH = 32
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)[:, None, None]
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)[:, None, None]


class SyntheticImages(Dataset):
    """Images made from their index and augmented on the host, with a class label."""

    def __init__(self, n: int, size: int, crop: int) -> None:
        self.n, self.size, self.crop = n, size, crop

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(i)
        # "decode": a smooth image with noise, uint8 HWC as a decoder returns it
        yy, xx = np.mgrid[0:self.size, 0:self.size].astype(np.float32) / self.size
        base = np.stack([np.sin(6.28 * (xx * f + yy * g)) for f, g in rng.uniform(0.5, 3.0, (3, 2))], axis=-1)
        img = np.clip((base * 0.5 + 0.5) * 255 + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        # augment: pad + random crop, flip, brightness/contrast jitter, normalize
        img = np.pad(img, ((4, 4), (4, 4), (0, 0)), mode="reflect")
        top, left = rng.integers(0, img.shape[0] - self.crop + 1, 2)
        img = img[top:top + self.crop, left:left + self.crop]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        x = img.astype(np.float32).transpose(2, 0, 1) / 255.0
        x = (x - x.mean()) * rng.uniform(0.8, 1.2) + x.mean() * rng.uniform(0.8, 1.2)
        x = (np.clip(x, 0, 1) - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(x)), int(rng.integers(0, 10))


def cnn(width: int) -> nn.Sequential:
    """Four conv + batch norm + ReLU stages (the last three stride 2), global pooling, a linear head."""
    layers: list[nn.Module] = []
    chans = [3, width, 2 * width, 4 * width, 8 * width]
    for i, (a, b) in enumerate(zip(chans[:-1], chans[1:])):
        layers += [nn.Conv2d(a, b, 3, stride=1 if i == 0 else 2, padding=1, bias=False), nn.BatchNorm2d(b),
                   nn.ReLU(inplace=True)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(chans[-1], 10))


def build(variant: str, setup: Setup) -> Step:
    """One training step of ``variant`` (the next batch, forward, backward, SGD)."""
    dev = setup.device
    size, crop, width = setup.pick((64, 56, 64), (32, 24, 8))
    batch = setup.pick(BATCH, 4)
    data = SyntheticImages(32 * batch, size, crop)
    workers = variant == "workers"
    if workers:
        loader = DataLoader(data, batch_size=batch, shuffle=True, num_workers=4, pin_memory=setup.cuda,
                            persistent_workers=True)
    else:
        loader = DataLoader(data, batch_size=batch, shuffle=True)
    torch.manual_seed(0)
    model = cnn(width).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def epochs() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield from loader

    batches = epochs()

    def step() -> torch.Tensor:
        x, y = next(batches)
        x, y = x.to(dev, non_blocking=workers), y.to(dev, non_blocking=workers)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


PROGRAM = Program(
    name="dataloader_cnn",
    description="small CNN training, DataLoader(num_workers=0) with NumPy decode + augmentation per sample, batch 32",
    variants=(
        Variant("as_written", "DataLoader(num_workers=0)", samples=BATCH),
        Variant("workers", "num_workers=4, pin_memory=True, persistent_workers=True", ("data_loader",),
                samples=BATCH),
    ),
    build=build,
    iterations=300,
    measure_iterations=30,
    warmup=10,
    marks="optimizer",
)

if __name__ == "__main__":
    main(PROGRAM)
