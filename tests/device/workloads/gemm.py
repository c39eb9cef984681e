"""Compute-bound: back-to-back 8192^3 bf16 matrix products, one host sync per step."""

import torch

from common import maybe_torch_profiler, parser, report, run_steps


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--per-step", type=int, default=4)
    args = p.parse_args()
    a = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)

    def step() -> None:
        for _ in range(args.per_step):
            torch.matmul(a, b, out=c)

    with maybe_torch_profiler(args.torch_profiler):
        times = run_steps(step, torch.cuda.synchronize, args)
    flops = 2 * args.n**3 * args.per_step
    report(args, times, tflops=flops / min(times) / 1e12)


if __name__ == "__main__":
    main()
