"""Planted: a DataLoader with ``num_workers=0`` whose ``__getitem__`` does 0.15 ms of Python per
sample: the training loop waits about 5 ms for each batch of 32 while the GPU, with about 3 ms
of work per step, sits idle.

Fix (``--fixed``): ``num_workers=4``, ``persistent_workers=True``, ``prefetch_factor=4``.
"""

import torch
from torch.utils.data import DataLoader, Dataset

from common import cuda, parser, python_work, run

SAMPLE_S = 0.00015


class Decoding(Dataset):
    """Samples that take Python time to produce (decoding, augmentation)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        python_work(SAMPLE_S)
        g = torch.Generator().manual_seed(i)
        return torch.randn(1024, generator=g)


def main() -> None:
    args = parser(__doc__, steps=150, warmup=10).parse_args()
    dev = cuda()
    data = Decoding(32 * (args.steps + args.warmup + 8))
    if args.fixed:
        loader = DataLoader(data, batch_size=32, pin_memory=True, num_workers=4, persistent_workers=True,
                            prefetch_factor=4)
    else:
        loader = DataLoader(data, batch_size=32, pin_memory=True, num_workers=0)  # PLANTED: loads in the loop
    batches = iter(loader)
    torch.manual_seed(0)
    w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) / 64
    big = torch.randn(8192, 4096, device=dev, dtype=torch.bfloat16)

    def step(i: int) -> None:
        x = next(batches).to(dev, non_blocking=True)  # PLANTED: waits for the batch to be loaded
        h = big * (1 + x.mean()).to(torch.bfloat16)
        for _ in range(6):
            h = torch.relu(h @ w)
        h.float().mean()

    run(step, args)


if __name__ == "__main__":
    main()
