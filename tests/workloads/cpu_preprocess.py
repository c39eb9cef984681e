"""Planted: each batch is normalized in Python, sample by sample and value by value, in the
training loop: about 5 ms of host work per step for 2-3 ms of GPU work.

Fix (``--fixed``): keep the samples as one array and normalize the batch with tensor operations on
the GPU.
"""

import random

import numpy as np
import torch

from common import cuda, parser, run

BATCH, WIDTH = 64, 256


def normalize(sample: list[float]) -> list[float]:
    mean = sum(sample) / len(sample)
    var = sum((v - mean) ** 2 for v in sample) / len(sample)
    return [(v - mean) / (var ** 0.5 + 1e-6) for v in sample]


def main() -> None:
    args = parser(__doc__, steps=150, warmup=10).parse_args()
    dev = cuda()
    rng = random.Random(0)
    samples = [[rng.gauss(3.0, 2.0) for _ in range(WIDTH)] for _ in range(BATCH * 8)]
    array = torch.from_numpy(np.array(samples, dtype=np.float32)).pin_memory()
    torch.manual_seed(0)
    w_in = torch.randn(WIDTH, 4096, device=dev, dtype=torch.bfloat16) / 16
    w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) / 64
    big = torch.randn(8192 - 16 * BATCH, WIDTH, device=dev, dtype=torch.bfloat16)

    def step(i: int) -> None:
        k = (i % 8) * BATCH
        if args.fixed:
            x = array[k : k + BATCH].to(dev, non_blocking=True)
            x = (x - x.mean(1, keepdim=True)) / (x.std(1, unbiased=False, keepdim=True) + 1e-6)
        else:
            rows = [normalize(s) for s in samples[k : k + BATCH]]  # PLANTED: Python per value
            x = torch.tensor(rows).to(dev, non_blocking=True)
        h = torch.relu(torch.cat([x.to(torch.bfloat16).repeat(16, 1), big]) @ w_in)
        for _ in range(5):
            h = torch.relu(h @ w)
        h.float().mean()

    run(step, args)


if __name__ == "__main__":
    main()
