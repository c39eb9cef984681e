"""Planted: each step copies a 64 MB batch from pageable host memory (``tensor.to('cuda')``): the
driver stages it through a pinned buffer, slowly, while the host waits.

Fix (``--fixed``): keep the batches in pinned memory and copy with ``non_blocking=True``.
"""

import torch

from common import cuda, parser, run


def main() -> None:
    args = parser(__doc__, steps=100, warmup=5).parse_args()
    dev = cuda()
    torch.manual_seed(0)
    batches = [torch.randn(4096, 4096) for _ in range(4)]  # 64 MB each, float32
    if args.fixed:
        batches = [b.pin_memory() for b in batches]
    w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) / 64

    def step(i: int) -> None:
        x = batches[i % len(batches)].to(dev, non_blocking=args.fixed)  # PLANTED when pageable
        h = x.to(torch.bfloat16)
        for _ in range(8):
            h = torch.relu(h @ w)
        h.float().mean()

    run(step, args)


if __name__ == "__main__":
    main()
