"""A training loop starved by its DataLoader: each sample's ``__getitem__`` runs a Python loop (a
stand-in for decoding and augmentation), and the DataLoader loads the batches in the training
process (``num_workers=0``), so the loop waits for every batch.

Fixes: ``--fix workers1`` / ``--fix workers2``: ``num_workers=1`` / ``2`` (persistent workers), with
``torch.set_num_threads(1)`` so that PyTorch's threads and the workers do not fight for the cores;
``--fix workers2_threads``: ``num_workers=2``, PyTorch's threads as they are.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from loop_timing import Loop, StepClock, measure, parser

BATCH, WIDTH, HIDDEN, CLASSES = 8, 256, 1024, 10
WORK = 24000  # Python iterations per sample (about 1.5 ms)
STEPS = 40


class Decoding(Dataset):
    """Samples that take Python time to produce."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        acc = 0
        for k in range(WORK):
            acc = (acc * 31 + k * i) % 1_000_003  # the per-sample Python that costs
        return torch.full((WIDTH,), acc / 1e6), i % CLASSES


def loader(workers: int, steps: int) -> DataLoader:
    data = Decoding(BATCH * steps)
    if workers:
        return DataLoader(data, batch_size=BATCH, num_workers=workers, persistent_workers=True)
    return DataLoader(data, batch_size=BATCH, num_workers=0)


def train(batches: DataLoader) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = StepClock()
    for x, y in batches:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        clock.tick()
    return clock.times


FIXES = {"workers1": (1, 1), "workers2": (2, 1), "workers2_threads": (2, 0)}  # workers, threads (0: as is)


def variant(workers: int, threads: int = 0, steps: int = STEPS) -> Loop:
    def run() -> list[float]:
        before = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            return train(loader(workers, steps))
        finally:
            torch.set_num_threads(before)

    return run


def main() -> None:
    args = parser(__doc__, FIXES).parse_args()
    if args.measure:
        variants = {"as_written": variant(0), **{name: variant(*fix) for name, fix in FIXES.items()}}
        measure("dataloader_starved", variants, args.measure, args.rounds)
        return
    times = variant(*FIXES.get(args.fix or "", (0, 0)))()
    print(f"{len(times)} steps, median {sorted(times)[len(times) // 2] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
