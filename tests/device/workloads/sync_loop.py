"""A training-like loop with two host synchronizations per step: ``.item()`` and ``nonzero``.

Each step queues a few milliseconds of GPU work (matmuls), reads the loss with ``.item()`` (the
host waits for the queue to drain), then selects rows with ``nonzero`` (its output size is known
only on the GPU, so the host waits again). The lines of both are printed for checks.
"""

import json
import sys

import torch

from common import maybe_torch_profiler, parser, report, run_steps

LINES = {}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--chain", type=int, default=8, help="matmuls queued per step")
    p.add_argument("--lines-out", help="write the source lines of the two syncs (JSON) here")
    args = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    a = torch.randn(args.size, args.size, device=dev) / args.size ** 0.5
    x = torch.randn(args.size, args.size, device=dev)
    losses = []

    def step() -> None:
        h = x
        for _ in range(args.chain):
            h = torch.tanh(h @ a)
        LINES["item"] = sys._getframe().f_lineno + 1
        losses.append(h.square().mean().item())
        LINES["nonzero"] = sys._getframe().f_lineno + 1
        picked = (h[:, 0] > 0).nonzero()
        h[picked[:16, 0]].sum()

    with maybe_torch_profiler(args.torch_profiler):
        times = run_steps(step, torch.cuda.synchronize, args)
    if args.lines_out:
        with open(args.lines_out, "w") as fh:
            json.dump({"file": __file__, **LINES}, fh)
    report(args, times)


if __name__ == "__main__":
    main()
