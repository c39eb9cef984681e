"""A CPU training loop whose ``temp`` layer allocates a 256 MiB temporary in its forward (freed before it returns).

Run under ``gpuscope profile --trace torch,memory``: memory_sum shows a 256 MiB peak added on ``Net.temp``.
Also: 4 MiB allocated before the loop and freed during it (a free the profiler saw), and many small tensors.
"""

from __future__ import annotations

import torch
from torch import nn

TEMP_ELEMENTS = 64 * 1024 * 1024  # float32: 256 MiB


class Temp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.ones(TEMP_ELEMENTS)
        return x + t[:1].sum()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.temp = Temp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.temp(self.fc(x))


def main() -> None:
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    early = torch.empty(1024 * 1024)
    for step in range(3):
        opt.zero_grad()
        net(torch.randn(32, 64)).sum().backward()
        opt.step()
        if step == 1:
            del early
        small = [torch.empty(4) for _ in range(2000)]
        del small


if __name__ == "__main__":
    main()
