"""Shared helpers of the GPU workloads: timing output and an optional torch.profiler wrapper."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import time
from typing import Any, Callable, Iterator

STARTED = time.perf_counter()  # when the workload imported this (right after torch): its start


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--timing-out", help="write step timing (JSON) here")
    p.add_argument("--torch-profiler", metavar="TRACE_JSON",
                   help="run under torch.profiler (CPU+CUDA) and export its trace here")
    return p


@contextlib.contextmanager
def maybe_torch_profiler(path: str | None, with_stack: bool = False) -> Iterator[None]:
    """Run the block under torch.profiler (CPU + CUDA) and export its trace to ``path``."""
    if not path:
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=with_stack) as prof:
        yield
    prof.export_chrome_trace(path)


def run_steps(step: Callable[[], None], sync: Callable[[], None], args: argparse.Namespace) -> list[float]:
    """Run warm-up then timed steps; return each timed step's wall time in seconds."""
    for _ in range(args.warmup):
        step()
    sync()
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    return times


def report(args: argparse.Namespace, times: list[float], **extra: Any) -> None:
    doc = {
        "median_step_s": statistics.median(times),
        "mean_step_s": statistics.fmean(times),
        "steps": len(times),
        "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "pid": os.getpid(),
        "program_s": time.perf_counter() - STARTED,  # from the workload's start to its last step
        "step_ms": [round(t * 1e3, 4) for t in times],  # each step, for where a slowdown sits (stalls or every step)
        **extra,
    }
    if args.timing_out:
        with open(args.timing_out, "w") as fh:
            json.dump(doc, fh)
    print(f"median step {doc['median_step_s'] * 1e3:.3f} ms over {len(times)} steps")
