"""Planted: each step is 300 tiny elementwise operations on a 4096-element tensor: every kernel
takes a couple of microseconds, and launching it from Python takes longer.

Fix (``--fixed``): capture the step once in a CUDA graph and replay it.
"""

import torch

from common import cuda, parser, run

OPS = 100  # three kernels each


def main() -> None:
    args = parser(__doc__, steps=400, warmup=20).parse_args()
    dev = cuda()
    torch.manual_seed(0)
    x = torch.randn(4096, device=dev)
    a, b = torch.rand(4096, device=dev), torch.rand(4096, device=dev)
    out = torch.empty_like(x)

    def body() -> None:
        h = x
        for _ in range(OPS):
            h = torch.sin(h * a + b)
        out.copy_(h)

    if args.fixed:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            body()  # warm up on a side stream, as CUDA graph capture requires
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()

        def step(i: int) -> None:
            graph.replay()
    else:
        def step(i: int) -> None:
            body()  # PLANTED: 300 launches from Python

    run(step, args)


if __name__ == "__main__":
    main()
