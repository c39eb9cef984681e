"""A training loop that waits for its DataLoader: every sample's ``__getitem__`` waits 5 ms (a stand-in
for reading a file) and the DataLoader loads in the loop's process (``num_workers=0``); each step then
waits 20 ms more (a stand-in for the device's work), so loading and stepping take about as long. Both
are waits, not CPU work, so the result holds on a busy machine. Seeded: its losses repeat run to run.
One worker process hides the loading behind the step: ``gpuscope try`` is expected to add it and to
measure about half the step saved.

The model flattens its convolution's output with ``view``, as older models do: with the convolution in
channels_last that view fails, so ``gpuscope try --fix channels_last`` crashes this program."""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

BATCH, SIDE, CLASSES, STEPS = 4, 8, 4, 60
DEVICE_WAIT_S = 0.020  # few long waits: a busy machine's late wake-ups matter less


class Slow(Dataset):
    def __len__(self) -> int:
        return BATCH * STEPS

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.005)  # the file read that costs
        g = torch.Generator().manual_seed(i)
        return torch.randn(1, SIDE, SIDE, generator=g), i % CLASSES


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.head = nn.Linear(4 * SIDE * SIDE, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x))
        return self.head(h.view(h.shape[0], -1))


def main() -> None:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in DataLoader(Slow(), batch_size=BATCH, num_workers=0):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        time.sleep(DEVICE_WAIT_S)
        opt.step()


if __name__ == "__main__":
    main()
