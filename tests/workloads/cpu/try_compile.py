"""A tiny seeded MLP in an inference loop, eager: ``gpuscope try --fix compile`` compiles it."""

from __future__ import annotations

import torch
from torch import nn

STEPS = 40


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8))
    x = torch.randn(16, 32)
    with torch.no_grad():
        for _ in range(STEPS):
            y = model(x)
            x = x + 0.01 * y.sum()


if __name__ == "__main__":
    main()
