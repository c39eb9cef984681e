"""Planted: 256 small same-shape matrix multiplies (64x64 by 64x64, bf16) in a Python loop each
step: each kernel fills a few of the GPU's SMs, and each launch costs more than the kernel.

Fix (``--fixed``): one ``torch.bmm`` over the stacked operands.
"""

import torch

from common import cuda, parser, run

N = 256


def main() -> None:
    args = parser(__doc__, steps=200, warmup=10).parse_args()
    dev = cuda()
    torch.manual_seed(0)
    a = torch.randn(N, 64, 64, device=dev, dtype=torch.bfloat16)
    b = torch.randn(N, 64, 64, device=dev, dtype=torch.bfloat16)
    w = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16) / 32
    big = torch.randn(4096, 1024, device=dev, dtype=torch.bfloat16)

    def step(i: int) -> None:
        if args.fixed:
            c = torch.bmm(a, b)
        else:
            c = torch.stack([a[j] @ b[j] for j in range(N)])  # PLANTED: a loop of small GEMMs
        h = big + c.sum()
        for _ in range(4):
            h = torch.relu(h @ w)
        h.float().mean()

    run(step, args)


if __name__ == "__main__":
    main()
