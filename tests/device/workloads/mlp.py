"""Launch-bound training loop: 8 x (Linear(1024) + ReLU), batch 256, SGD: ~180 short kernels a step.

Before the loop it moves data the ways a training script does (pageable and pinned host-to-device
copies, a memset, a device-to-host copy, a host sync), so a report of it holds every record kind.
"""

import contextlib

import torch

from common import maybe_torch_profiler, parser, report, run_steps


def _no_range(name: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--nvtx", action="store_true", help="mark step, forward, backward, optimizer with NVTX ranges")
    args = p.parse_args()
    rng = torch.cuda.nvtx.range if args.nvtx else _no_range
    torch.manual_seed(0)
    dev = torch.device("cuda")
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with maybe_torch_profiler(args.torch_profiler):
        x_host = torch.randn(args.batch, args.width)
        x = x_host.to(dev)  # pageable host-to-device
        y = x_host.pin_memory().to(dev, non_blocking=True)  # pinned, asynchronous
        buf = torch.empty(4 << 20, dtype=torch.uint8, device=dev)
        buf.zero_()  # memset
        _ = y.sum().item()  # device-to-host copy and a host sync

        def step() -> None:
            with rng("step"):
                opt.zero_grad(set_to_none=True)
                with rng("forward"):
                    loss = model(x).square().mean()
                with rng("backward"):
                    loss.backward()
                with rng("optimizer"):
                    opt.step()

        times = run_steps(step, torch.cuda.synchronize, args)
    report(args, times)


if __name__ == "__main__":
    main()
