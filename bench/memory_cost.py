"""Cost of ``--trace memory`` on a small CPU training loop: wall time per step under ``--trace torch`` and
``--trace torch,memory`` (and untraced), interleaved rounds, median and spread.

    PYTHONPATH=src python bench/memory_cost.py [--rounds 5] [--steps 300]

The loop: a 3-layer MLP (256 wide, batch 64) with SGD, one intra-op thread. The program
times its own steps after 20 warm-up steps (the profiler's start-up is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LOOP = '''
import json, sys, time, torch
from torch import nn
torch.manual_seed(0)
torch.set_num_threads(1)
net = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
steps = int(sys.argv[2])
for i in range(steps + 20):
    if i == 20:
        t = time.perf_counter()
    opt.zero_grad()
    nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
json.dump({"step_s": (time.perf_counter() - t) / steps}, open(sys.argv[1], "w"))
'''


def run(trace: str | None, steps: int, work: Path) -> float:
    script, out = work / "loop.py", work / "t.json"
    script.write_text(LOOP)
    cmd = [sys.executable, str(script), str(out), str(steps)]
    if trace:
        cmd = [sys.executable, "-m", "gpuscope", "profile", "-t", trace, "-o", str(work / "r"), "--force-overwrite",
               *cmd]
    subprocess.run(cmd, check=True, capture_output=True, env=dict(os.environ))
    return float(json.loads(out.read_text())["step_s"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()
    variants = {"untraced": None, "torch": "torch", "torch,memory": "torch,memory"}
    times: dict[str, list[float]] = {k: [] for k in variants}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.rounds):
            for name, trace in variants.items():
                times[name].append(run(trace, args.steps, Path(d)))
    base = statistics.median(times["torch"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:14s} step {med * 1e6:8.1f} µs (min {min(ts) * 1e6:.1f}, max {max(ts) * 1e6:.1f}); "
              f"vs --trace torch {med / base:.3f}x")


if __name__ == "__main__":
    main()
