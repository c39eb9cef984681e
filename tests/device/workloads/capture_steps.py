"""The launch-bound MLP of mlp.py, for capture-range checks: optionally calls
torch.cuda.profiler.start() before step --profiler-start and stop() after step --profiler-stop
(steps count from 1, one optimizer step each), or profiles steps in-process with gpuscope.profile().

    python3 capture_steps.py --steps 30                                   # plain (under gpuscope profile)
    python3 capture_steps.py --steps 30 --profiler-start 12 --profiler-stop 16
    python3 capture_steps.py --steps 30 --inprocess OUT.gpuscope --inprocess-steps 5-9

Writes per-step facts to --facts-out (JSON): each step's launch count is the same, so any step's
kernel count of a full run is the truth for a captured one.
"""

import json

import torch

from common import parser


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--profiler-start", type=int)
    p.add_argument("--profiler-stop", type=int)
    p.add_argument("--inprocess", metavar="REPORT")
    p.add_argument("--inprocess-steps", default="5-9")
    p.add_argument("--facts-out")
    args = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.width, device=dev)
    first, _, last = args.inprocess_steps.partition("-")
    block = None
    for step in range(1, args.steps + 1):
        if step == args.profiler_start:
            torch.cuda.profiler.start()
        if args.inprocess and step == int(first):
            import gpuscope

            block = gpuscope.profile(args.inprocess, force_overwrite=True)
            block.start()
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()
        if step == args.profiler_stop:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
        if block is not None and step == int(last or first):
            torch.cuda.synchronize()
            block.stop()
            block = None
    torch.cuda.synchronize()
    if args.facts_out:
        with open(args.facts_out, "w") as fh:
            json.dump({"steps": args.steps, "profiler": [args.profiler_start, args.profiler_stop],
                       "inprocess": args.inprocess_steps if args.inprocess else None}, fh)
    print(f"done {args.steps} steps")


if __name__ == "__main__":
    main()
