"""CUDA graphs: an MLP forward captured once and replayed each step, inside gpuscope ranges.

Each step replays the graph inside the range ``replay`` and then runs one eager kernel inside the
range ``eager``, so a check can see whether the graph's kernels are attributed to the range
around their replay. The number of steps is written for checks.
"""

import json

import torch

import gpuscope
from common import parser, report, run_steps


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--facts-out", help="write kernels per replay (JSON) here")
    args = p.parse_args()
    dev = torch.device("cuda")
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(512, 512), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(dev).eval()
    static_in = torch.randn(64, 512, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            model(static_in)  # warm up on a side stream, as CUDA graph capture requires
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_out = model(static_in)
    torch.cuda.synchronize()

    def step() -> None:
        with gpuscope.annotate("replay"):
            graph.replay()
        with gpuscope.annotate("eager"):
            static_out.add_(1.0)

    times = run_steps(step, torch.cuda.synchronize, args)
    if args.facts_out:
        with open(args.facts_out, "w") as fh:
            json.dump({"steps": args.steps + args.warmup}, fh)
    report(args, times)


if __name__ == "__main__":
    main()
