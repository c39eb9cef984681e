"""Planted: float32 matrix multiplies with TF32 off (PyTorch's default for matmul): cuBLAS runs them
on the CUDA cores.

Fix (``--fixed``): ``torch.set_float32_matmul_precision('high')`` (TF32 on the tensor cores).
"""

import torch

from common import cuda, parser, run


def main() -> None:
    args = parser(__doc__, steps=40, warmup=5).parse_args()
    dev = cuda()
    torch.set_float32_matmul_precision("high" if args.fixed else "highest")  # PLANTED: "highest"
    torch.manual_seed(0)
    w = [torch.randn(4096, 4096, device=dev) / 64 for _ in range(2)]
    x = torch.randn(4096, 4096, device=dev)

    def step(i: int) -> None:
        h = x
        for _ in range(4):
            for m in w:
                h = torch.tanh(h @ m)
        h.mean()

    run(step, args)


if __name__ == "__main__":
    main()
