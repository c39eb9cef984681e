"""A small CNN training loop (ResNet-like blocks on 32x32 images, batch 64, SGD with momentum)."""

import torch

from common import maybe_torch_profiler, parser, report, run_steps


def block(c: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c), torch.nn.ReLU(),
        torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c), torch.nn.ReLU())


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--channels", type=int, default=64)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    c = args.channels
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, c, 3, padding=1), torch.nn.ReLU(), block(c), block(c),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(c, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    with maybe_torch_profiler(args.torch_profiler):
        times = run_steps(step, torch.cuda.synchronize, args)
    report(args, times)


if __name__ == "__main__":
    main()
