"""Planted: each step copies an 8 MB result into a pinned host buffer with a blocking copy and
then inspects it on the host (3 ms): the host waits for the GPU before its own work, so the two
never overlap.

Fix (``--fixed``): copy with ``non_blocking=True`` into one of two pinned buffers, record an event,
and inspect the previous step's buffer (its event has long completed) while the GPU works.
"""

import torch

from common import cuda, parser, python_work, run

INSPECT_S = 0.003


def main() -> None:
    args = parser(__doc__, steps=150, warmup=10).parse_args()
    dev = cuda()
    torch.manual_seed(0)
    w = [torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) / 64 for _ in range(4)]
    x = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    buffers = [torch.empty(2048, 1024, dtype=torch.float32).pin_memory() for _ in range(2)]
    events = [torch.cuda.Event(), torch.cuda.Event()]
    seen: list[float] = []

    def inspect(buf: torch.Tensor) -> None:
        seen.append(float(buf[0, 0]))
        python_work(INSPECT_S)  # look at the result on the host: checks, logging

    def step(i: int) -> None:
        h = x
        for _ in range(4):
            for m in w:
                h = torch.tanh(h @ m)
        out = h[:2048, :1024].float()
        if args.fixed:
            cur, prev = i % 2, (i + 1) % 2
            buffers[cur].copy_(out, non_blocking=True)
            events[cur].record()
            if i:
                events[prev].synchronize()
                inspect(buffers[prev])
        else:
            buffers[0].copy_(out)  # PLANTED: a blocking device-to-host copy
            inspect(buffers[0])

    run(step, args)


if __name__ == "__main__":
    main()
