"""A training loop with nothing to fix: whole batches come from memory (a batch sampler over a
TensorDataset: one indexing operation per batch), PyTorch uses every core, and the step's time is
the model's operators.

Candidate fix: ``--fix workers1`` (a DataLoader worker: there is no load to take off the loop).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

from loop_timing import Loop, StepClock, measure, parser

BATCH, WIDTH = 128, 768
STEPS = 50


def loader(workers: int, steps: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(BATCH * steps, WIDTH, generator=g),
                         torch.randint(0, 10, (BATCH * steps,), generator=g))
    batches = BatchSampler(SequentialSampler(data), BATCH, drop_last=True)
    return DataLoader(data, sampler=batches, batch_size=None, num_workers=workers,
                      persistent_workers=workers > 0)


def train(batches: DataLoader) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                          nn.Linear(WIDTH, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    clock = StepClock()
    for x, y in batches:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        clock.tick()
    return clock.times


def variant(workers: int) -> Loop:
    return lambda: train(loader(workers, STEPS))


def main() -> None:
    args = parser(__doc__, ["workers1"]).parse_args()
    if args.measure:
        measure("balanced", {"as_written": variant(0), "workers1": variant(1)}, args.measure, args.rounds)
        return
    times = variant(1 if args.fix == "workers1" else 0)()
    print(f"{len(times)} steps, median {sorted(times)[len(times) // 2] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
