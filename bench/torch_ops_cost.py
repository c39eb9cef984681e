"""Cost per PyTorch operator of gpuscope's operator collector (``--trace torch-ops``), in-process.

Times two loops in three ways, interleaved over several rounds, by the process's CPU time (this
machine is shared; wall time varies more), and reports the median extra time per operator against
the plain loop:

- ``off``: gpuscope's dispatch mode installed with recording off: what a Python dispatch mode costs
  (a forked child, a paused capture);
- ``recording``: gpuscope's mode recording every operator, the rows then turned into report rows as
  the agent's flush does.

The loops: ``small ops`` runs ``add``, ``linear`` (``t`` + ``addmm``) and ``conv2d`` on tensors
that need no gradient, so that the operators themselves cost little; ``training`` is the CPU
training step of bench/workloads/cpu_work.py (4 x Linear(128) + ReLU, batch 32, forward, backward,
SGD: about 80 operators).

With ``--end-to-end ROUNDS`` it also profiles that training (fresh processes, interleaved) with
``-t torch,host`` and ``-t torch,host,torch-ops``, and reports the difference per recorded operator,
the flush and the report writing included.

    python3 bench/torch_ops_cost.py [--end-to-end 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode, _push_mode

from gpuscope.capture.torch_ops import TorchOps

ROUNDS = 15

torch.set_num_threads(1)
A = torch.randn(4, 4)
W = torch.randn(4, 4)
IMG = torch.randn(1, 2, 5, 5)
KER = torch.randn(2, 2, 3, 3)
MODEL = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(128, 128), torch.nn.ReLU())])
OPT = torch.optim.SGD(MODEL.parameters(), lr=1e-3)
X = torch.randn(32, 128)


def small_ops() -> None:
    for _ in range(1000):
        torch.add(A, 1.0)
        torch.nn.functional.linear(A, W)
        torch.nn.functional.conv2d(IMG, KER, padding=1)


def training() -> None:
    for _ in range(40):
        OPT.zero_grad()
        MODEL(X).square().mean().backward()
        OPT.step()


def _count_ops(work: Callable[[], None]) -> int:
    seen: list[Any] = []

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Count():
        work()
    return len(seen)


def _cpu_time(fn: Callable[[], None]) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def main() -> None:
    rec = TorchOps(0, lambda level, msg: None)
    rec.install(torch)  # pushed on this thread: every later loop sees it unless popped
    _pop_mode()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"torch {torch.__version__}; {ROUNDS} rounds, process CPU time")
    for work in (small_ops, training):
        ops = _count_ops(work)

        def with_rec(recording: bool, work: Callable[[], None] = work) -> Callable[[], None]:
            def run() -> None:
                rec.recording = recording
                _push_mode(rec.mode)
                try:
                    work()
                finally:
                    _pop_mode()
                rec.take()

            return run

        cases = {"plain": work, "off": with_rec(False), "recording": with_rec(True)}
        for fn in cases.values():  # warm up: plans, signatures, allocator
            fn()
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(ROUNDS):
            for name, fn in cases.items():
                times[name].append(_cpu_time(fn))
        base = statistics.median(times["plain"]) / ops
        print(f"{work.__name__}: {ops} operators a run, plain {base * 1e6:.2f} µs per operator")
        for name in ("off", "recording"):
            extra = [(t - p) / ops * 1e6 for t, p in zip(times[name], times["plain"])]
            print(f"  {name}: +{statistics.median(extra):.2f} µs per operator "
                  f"(range {min(extra):.2f} - {max(extra):.2f})")
    print(f"rows recorded: {rec.counts['ops']:,}, failed: {rec.counts['failed']}")


def end_to_end(rounds: int) -> None:
    """Profile the CPU training with and without operators; print seconds and cost per operator."""
    import gpuscope

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cpu_overhead import run

    modes = {"untraced": None, "torch,host": "torch,host", "torch,host,torch-ops": "torch,host,torch-ops"}
    times: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(rounds):
            for label, mode in modes.items():
                times[label].append(run(mode, "torch", scratch))
        with gpuscope.load(os.path.join(scratch, "r.gpuscope")) as report:
            ops = report.count("torch_op")
    for label in modes:
        print(f"{label}: {statistics.median(times[label]):.3f} s (median of {rounds})")
    extra = [(t - b) / ops * 1e6 for t, b in zip(times["torch,host,torch-ops"], times["torch,host"])]
    print(f"{ops:,} operators recorded: +{statistics.median(extra):.2f} µs per operator "
          f"(range {min(extra):.2f} - {max(extra):.2f})")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--end-to-end", type=int, default=0, metavar="ROUNDS")
    a = p.parse_args()
    main()
    if a.end_to_end:
        end_to_end(a.end_to_end)
