"""Planted: the loss is read with ``.item()`` every step, then the host logs for 3 ms. The host
waits for the GPU's 4 ms of work and only then does its own, so the two never overlap.

Fix (``--fixed``): keep the running loss on the GPU and read it every 50 steps.
"""

import torch

from common import cuda, parser, python_work, run

LOG_S = 0.003


def main() -> None:
    args = parser(__doc__, steps=150, warmup=10).parse_args()
    dev = cuda()
    torch.manual_seed(0)
    w = [torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) / 64 for _ in range(4)]
    x = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    running = torch.zeros((), device=dev)
    log: list[float] = []

    def step(i: int) -> None:
        nonlocal running
        h = x
        for _ in range(5):
            for m in w:
                h = torch.tanh(h @ m)
        loss = h.float().square().mean()
        if args.fixed:
            running += loss.detach()
            if i % 50 == 49:
                log.append(running.item() / 50)
                running.zero_()
        else:
            log.append(loss.item())  # PLANTED: a host sync every step
        python_work(LOG_S)  # logging, metrics, bookkeeping

    run(step, args)


if __name__ == "__main__":
    main()
