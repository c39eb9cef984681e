"""An inference loop (no optimizer, no step marks) whose time goes to one line of Python: the
predicted class of every row is picked in Python over the logits as a list, after a forward pass
that takes a fraction of that.

Fix: ``--fix argmax`` (``logits.argmax(1).tolist()``: one tensor operation over the batch).
"""

from __future__ import annotations

import torch
from torch import nn

from loop_timing import Loop, StepClock, measure, parser

BATCH, WIDTH, CLASSES = 128, 256, 1000
STEPS = 60


def infer(fixed: bool, steps: int = STEPS) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, 512), nn.ReLU(), nn.Linear(512, CLASSES)).eval()
    inputs = [torch.randn(BATCH, WIDTH) for _ in range(8)]
    predictions: list[int] = []
    clock = StepClock()
    for i in range(steps):
        with torch.no_grad():
            logits = model(inputs[i % len(inputs)])
        if fixed:
            best = logits.argmax(1).tolist()
        else:
            best = [max(range(len(row)), key=row.__getitem__) for row in logits.tolist()]  # the hot line
        predictions += best
        clock.tick()
    return clock.times


def variant(fixed: bool) -> Loop:
    return lambda: infer(fixed)


def main() -> None:
    args = parser(__doc__, ["argmax"]).parse_args()
    if args.measure:
        measure("infer_hot_line", {"as_written": variant(False), "argmax": variant(True)}, args.measure, args.rounds)
        return
    times = infer(args.fix == "argmax")
    print(f"{len(times)} steps, median {sorted(times)[len(times) // 2] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
