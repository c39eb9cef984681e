"""Shared parts of the diagnosis workloads: arguments, the CUDA check, CPU work of a known length,
and the timed step loop.

Every workload has one planted bottleneck and a ``--fixed`` variant with the fix applied. Each step
runs in an NVTX range named ``step`` (gpuscope takes its steps from them) and is timed on the GPU
with CUDA events recorded at step starts, so that timing adds no host synchronization: the median
step time is the GPU's step period, whichever side is the bottleneck.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # torch is imported on use, so that a workload can set up its environment first
    import torch


def parser(doc: str | None, steps: int, warmup: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--fixed", action="store_true", help="run with the fix applied")
    p.add_argument("--steps", type=int, default=steps, help="timed steps")
    p.add_argument("--warmup", type=int, default=warmup, help="untimed steps first")
    p.add_argument("--timing-out", help="write the step timing (JSON) here")
    return p


def cuda() -> torch.device:
    """The GPU; exits with a message when there is none."""
    import torch

    if not torch.cuda.is_available():
        sys.exit("this workload needs a CUDA GPU")
    return torch.device("cuda")


def python_work(seconds: float) -> int:
    """Run Python bytecode for ``seconds`` (CPU work of a known length, like logging or bookkeeping)."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def _one(step: Callable[[int], None], i: int) -> None:
    import torch

    torch.cuda.nvtx.range_push("step")
    step(i)
    torch.cuda.nvtx.range_pop()


def run(step: Callable[[int], None], args: argparse.Namespace, metric: str = "median_step_s", **extra: Any) -> None:
    """Run ``args.warmup`` then ``args.steps`` steps of ``step(i)``; print and write the timing.

    ``median_step_s``/``mean_step_s``: of the timed steps, from CUDA events; ``total_s``: wall time of
    all steps, warm-up included (for workloads whose problem is the warm-up). ``metric`` names the
    number the workload's fix improves.
    """
    import torch

    t0 = time.perf_counter()
    for i in range(args.warmup):
        _one(step, i)
    events = []
    for i in range(args.steps):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        events.append(event)
        _one(step, args.warmup + i)
    end = torch.cuda.Event(enable_timing=True)
    end.record()
    torch.cuda.synchronize()
    total = time.perf_counter() - t0
    events.append(end)
    times = [a.elapsed_time(b) / 1e3 for a, b in zip(events, events[1:])]
    doc = {
        "workload": os.path.basename(sys.argv[0]).removesuffix(".py"),
        "fixed": bool(args.fixed),
        "median_step_s": statistics.median(times),
        "mean_step_s": statistics.fmean(times),
        "total_s": total,
        "steps": len(times),
        "warmup_steps": args.warmup,
        "metric": metric,
        "device": torch.cuda.get_device_name(),
        **extra,
    }
    if args.timing_out:
        with open(args.timing_out, "w") as fh:
            json.dump(doc, fh)
    print(f"{doc['workload']}{' --fixed' if args.fixed else ''}: median step {doc['median_step_s'] * 1e3:.3f} ms, "
          f"all {len(times) + args.warmup} steps {total:.2f} s")
