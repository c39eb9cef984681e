"""An inference loop whose batches are normalized in Python, sample by sample and value by value,
before one batched call of a small model: the preprocessing takes most of the step.

Fix: ``--fix vectorized`` (the batch normalized with tensor operations).
"""

from __future__ import annotations

import random

import torch
from torch import nn

from loop_timing import Loop, StepClock, measure, parser

BATCH, WIDTH = 32, 64
STEPS = 1200
FIXES = {"vectorized": ("the batch normalized with tensor operations", ("hot_line",))}


def normalize(sample: list[float]) -> list[float]:
    mean = sum(sample) / len(sample)
    var = sum((v - mean) ** 2 for v in sample) / len(sample)
    return [(v - mean) / (var ** 0.5 + 1e-6) for v in sample]  # the per-value Python


def infer(vectorized: bool, steps: int = STEPS) -> list[float]:
    torch.manual_seed(0)
    rng = random.Random(0)
    samples = [[rng.gauss(3.0, 2.0) for _ in range(WIDTH)] for _ in range(BATCH * 4)]
    array = torch.tensor(samples)
    model = nn.Sequential(nn.Linear(WIDTH, 256), nn.ReLU(), nn.Linear(256, 10)).eval()
    clock = StepClock()
    with torch.no_grad():
        for i in range(steps):
            k = (i % 4) * BATCH
            if vectorized:
                x = array[k:k + BATCH]
                x = (x - x.mean(1, keepdim=True)) / (x.std(1, unbiased=False, keepdim=True) + 1e-6)
            else:
                x = torch.tensor([normalize(s) for s in samples[k:k + BATCH]])
            model(x).argmax(1)
            clock.tick()
    return clock.times


def variant(vectorized: bool) -> Loop:
    return lambda: infer(vectorized)


def main() -> None:
    args = parser(__doc__, FIXES).parse_args()
    if args.measure:
        measure("preprocess_loop", {"as_written": variant(False), "vectorized": variant(True)}, args.measure,
                args.rounds)
        return
    times = infer(args.fix == "vectorized")
    print(f"{len(times)} steps, median {sorted(times)[len(times) // 2] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
