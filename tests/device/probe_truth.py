"""Time a program's steps without any profiler: run it as ``python PROGRAM ARGS`` would, with a global
optimizer-step hook that notes when each ``optimizer.step()`` ends, and print the mark-to-mark
durations as JSON. The same measure as the overhead probe's (analysis/steps/probe.py), so the probe's
steps with collection off can be set against it.

    python tests/device/probe_truth.py tests/workloads/conv_train_bf16.py > untraced.json
"""

from __future__ import annotations

import json
import runpy
import sys
import time
from pathlib import Path


def main() -> None:
    import torch.optim.optimizer as optim_mod  # the module of the global optimizer hooks

    marks: list[int] = []
    first: list[int] = []  # the optimizer whose steps count (the first one seen), as gpuscope counts them

    def done(optimizer: object, args: object, kwargs: object) -> None:
        if not first:
            first.append(id(optimizer))
        if id(optimizer) == first[0]:
            marks.append(time.perf_counter_ns())

    optim_mod.register_optimizer_step_post_hook(done)
    program = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, str(Path(program).resolve().parent))  # as python PROGRAM puts its folder first
    try:
        runpy.run_path(program, run_name="__main__")
    finally:
        durations = [b - a for a, b in zip(marks, marks[1:])]
        print(json.dumps({"program": program, "marks": len(marks), "durations_ns": durations}))


if __name__ == "__main__":
    main()
