"""A program that runs out of GPU memory with known live tensors: 3 GiB in ``Net.big``, 1 GiB in ``Net.small``,
then a request far beyond the GPU (``Net.huge``). Writes the truth to --out before the failure; exits with the OOM.
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn

GIB = 1024**3
HUGE = 4096 * GIB  # more than any GPU has


class Keep(nn.Module):
    def __init__(self, nbytes: int) -> None:
        super().__init__()
        self.nbytes = nbytes
        self.kept: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.kept.append(torch.empty(self.nbytes, dtype=torch.uint8, device=x.device))
        return x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.big = Keep(3 * GIB)
        self.small = Keep(1 * GIB)
        self.huge = Keep(HUGE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.small(self.big(x))
        return self.huge(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    with open(args.out, "w") as fh:
        json.dump({"live": [["Net.big", 3 * GIB], ["Net.small", 1 * GIB]], "requested_bytes": HUGE,
                   "failing_layer": "Net.huge"}, fh)
    Net()(torch.zeros(8, device="cuda"))


if __name__ == "__main__":
    main()
