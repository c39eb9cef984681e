"""The launch-bound MLP of tests/device/workloads/mlp.py on the CPU: 8 x (Linear + ReLU), SGD, small enough
that each step's time is the operators' dispatch (about 90 operators a step), as a launch-bound GPU step's is.

    python bench/workloads/mlp_cpu.py --steps 300 --warmup 30 --timing-out T.json

One intra-op thread (a shared machine's scheduling out of the step). Writes the same timing JSON as the GPU
workloads (tests/device/workloads/common.py).
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "device" / "workloads"))
from common import parser, report, run_steps


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.width)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    report(args, run_steps(step, lambda: None, args))


if __name__ == "__main__":
    main()
