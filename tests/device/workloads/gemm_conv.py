"""Matrix products and convolutions in bf16, forward and backward, for the roofline check: a Linear
layer (addmm), a batched product (bmm) and a 3x3 convolution with bias, each a few times.

Sizes are multiples of 128 so that GEMM tiles divide them (no padded tile work that hardware
counters would see and the work model would not). cuDNN's autotuner stays off, so a second run of
the program (under ncu) launches the same kernels in the same order.
"""

import torch

from common import parser, report, run_steps


def main() -> None:
    p = parser(__doc__)
    p.set_defaults(steps=2, warmup=1)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--width", type=int, default=1024)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    dev, bf = torch.device("cuda"), torch.bfloat16
    linear = torch.nn.Linear(args.width, 2 * args.width, device=dev, dtype=bf)
    conv = torch.nn.Conv2d(128, 128, 3, padding=1, device=dev, dtype=bf).to(memory_format=torch.channels_last)
    x = torch.randn(args.tokens, args.width, device=dev, dtype=bf, requires_grad=True)
    images = torch.randn(16, 128, 32, 32, device=dev, dtype=bf).to(memory_format=torch.channels_last)
    images.requires_grad_(True)
    a = torch.randn(32, 256, 512, device=dev, dtype=bf)
    b = torch.randn(32, 512, 384, device=dev, dtype=bf)

    def step() -> None:
        y = linear(x)
        z = conv(images)
        (y.float().sum() + z.float().sum()).backward()
        torch.bmm(a, b)

    times = run_steps(step, torch.cuda.synchronize, args)
    report(args, times)


if __name__ == "__main__":
    main()
