"""Training a model of large matrix products with ``torch.set_num_threads(1)`` on a machine with
more cores: PyTorch's operators run on one core and leave the others idle.

Fix: ``--fix threads`` (as many threads as cores, PyTorch's default).
"""

from __future__ import annotations

import os

import torch
from torch import nn

from loop_timing import Loop, StepClock, measure, parser

BATCH, WIDTH = 128, 1024
STEPS = 100


def train(threads: int, steps: int = STEPS) -> list[float]:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                          nn.Linear(WIDTH, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(BATCH, WIDTH), torch.randint(0, 10, (BATCH,))) for _ in range(4)]
    clock = StepClock()
    for i in range(steps):
        x, y = data[i % len(data)]
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        clock.tick()
    return clock.times


def variant(threads: int) -> Loop:
    return lambda: train(threads)


def main() -> None:
    args = parser(__doc__, ["threads"]).parse_args()
    cores = os.cpu_count() or 1
    if args.measure:
        measure("one_thread", {"as_written": variant(1), "threads": variant(cores)}, args.measure, args.rounds)
        return
    times = train(cores if args.fix == "threads" else 1)  # as written: torch.set_num_threads(1)
    print(f"{len(times)} steps, median {sorted(times)[len(times) // 2] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
