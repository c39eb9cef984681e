"""GPU memory truth: a small model whose ``planted`` layer makes a 2 GiB activation in its forward.

Writes the truth (``torch.cuda.max_memory_allocated()`` at the end, the planted size and layer) to --out.
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn

PLANTED_BYTES = 2 * 1024**3


class Planted(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = torch.ones(PLANTED_BYTES // 4, device=x.device)  # float32: 2 GiB, freed before the forward returns
        return x + act[:1].sum()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(1024, 1024)
        self.planted = Planted()
        self.fc2 = nn.Linear(1024, 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.planted(self.fc1(x)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args()
    net = Net().cuda()
    opt = torch.optim.Adam(net.parameters())
    for _ in range(args.steps):
        opt.zero_grad()
        net(torch.randn(256, 1024, device="cuda")).sum().backward()
        opt.step()
    torch.cuda.synchronize()
    with open(args.out, "w") as fh:
        json.dump({"max_memory_allocated": torch.cuda.max_memory_allocated(),
                   "max_memory_reserved": torch.cuda.max_memory_reserved(),
                   "planted_bytes": PLANTED_BYTES, "planted_layer": "Net.planted"}, fh)


if __name__ == "__main__":
    main()
