"""An inference loop of a small MLP that calls the model once per item of each batch
(``model(x[None])`` in a loop over the rows): every call pays the modules' and operators' fixed cost
for one row of work. No optimizer, no step marks.

Fix: ``--fix batched`` (one ``model(batch)`` call per batch).
"""

from __future__ import annotations

import torch
from torch import nn

from loop_timing import Loop, StepClock, measure, parser

BATCH, WIDTH, CLASSES = 32, 64, 10
STEPS = 800
FIXES = {"batched": ("one model(batch) call per batch", ("hot_line",))}


def infer(batched: bool, steps: int = STEPS) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                          nn.Linear(128, CLASSES)).eval()
    batches = [torch.randn(BATCH, WIDTH) for _ in range(8)]
    labels: list[torch.Tensor] = []
    clock = StepClock()
    with torch.no_grad():
        for i in range(steps):
            batch = batches[i % len(batches)]
            if batched:
                logits = model(batch)
            else:
                logits = torch.cat([model(x[None]) for x in batch])  # one call per item
            labels.append(logits.argmax(1))
            clock.tick()
    return clock.times


def variant(batched: bool) -> Loop:
    return lambda: infer(batched)


def main() -> None:
    args = parser(__doc__, FIXES).parse_args()
    if args.measure:
        measure("infer_mlp_per_item", {"as_written": variant(False), "batched": variant(True)}, args.measure,
                args.rounds)
        return
    times = infer(args.fix == "batched")
    print(f"{len(times)} steps, median {sorted(times)[len(times) // 2] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
