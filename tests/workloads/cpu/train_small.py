"""A training loop as a user writes it: a small MLP, SGD, batches from a list, the loss printed
every 100 steps. Nothing to fix on a CPU: the step is the model's operators.

Candidate fix: ``--fix no_print`` (no loss printed).
"""

from __future__ import annotations

import torch
from torch import nn

from loop_timing import Loop, StepClock, measure, parser

BATCH, WIDTH = 64, 256
STEPS = 1200
FIXES = {"no_print": ("no loss printed every 100 steps", ())}


def train(report: bool, steps: int = STEPS) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                          nn.Linear(WIDTH, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(BATCH, WIDTH), torch.randint(0, 10, (BATCH,))) for _ in range(8)]
    clock = StepClock()
    for i in range(steps):
        x, y = data[i % len(data)]
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if report and i % 100 == 0:
            print(f"step {i}: loss {loss.item():.3f}")
        clock.tick()
    return clock.times


def variant(report: bool) -> Loop:
    return lambda: train(report)


def main() -> None:
    args = parser(__doc__, FIXES).parse_args()
    if args.measure:
        measure("train_small", {"as_written": variant(True), "no_print": variant(False)}, args.measure, args.rounds)
        return
    times = train(args.fix != "no_print")
    print(f"{len(times)} steps, median {sorted(times)[len(times) // 2] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
