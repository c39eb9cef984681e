"""Cost per PyTorch operator of gpuscope's operator collector (``--trace torch-ops``), in-process.

Times three loops in four ways, interleaved over several rounds (the order of the four turning from
round to round, a garbage collection before each), by the process's CPU time (this machine is
shared; wall time varies more), and reports the median extra time per operator against the plain
loop, taken in the same round:

- ``plain``: without gpuscope (no dispatch mode on the stack, torch's mode flags as before the install);
- ``off``: collection off (outside a capture window): the recorder's mode taken off the main
  thread's stack by ``recording = False``, as the capture window does;
- ``pass-through``: the mode on the stack with recording off: what a Python dispatch mode costs, what
  other threads pay while collection is off (and the main thread paid before the mode left its stack);
- ``recording``: gpuscope's mode recording every operator, the rows then turned into report rows as
  the agent's flush does.

The loops: ``small ops`` runs ``add``, ``linear`` (``t`` + ``addmm``) and ``conv2d`` on tensors
that need no gradient, so that the operators themselves cost little; ``mlp`` is 8 x (Linear(64) +
ReLU), batch 32, forward and backward (about 70 operators); ``training`` is the CPU training step of
bench/workloads/cpu_work.py (4 x Linear(128) + ReLU, batch 32, forward, backward, SGD: about 80
operators).

With ``--end-to-end ROUNDS`` it also profiles that training (fresh processes, interleaved) with
``-t torch,host`` and ``-t torch,host,torch-ops``, and reports the difference per recorded operator,
the flush and the report writing included.

``--after-window ROUNDS`` (instead of the above) measures the sampling recorder (``--trace
torch-shapes``) once its window is over: a recorder with the default policy is installed, the
training runs with step marks until its window has closed, and then the three loops are timed as
above against ``plain``, with the handler's calls counted (none are expected).

``--shapes ROUNDS`` profiles the training of bench/workloads/cpu_work.py (1000 steps) untraced,
with ``-t torch,host``, ``-t torch,host,torch-shapes`` and ``-t torch,host,torch-ops``, fresh
processes, the order of the four turning from round to round; it reports the whole run and its last
800 steps (well after the sample window, which closes at the end of step 3) as ratios to the
untraced run of the same round (median and range).

    python3 bench/torch_ops_cost.py [--rounds 15] [--end-to-end 5]
    python3 bench/torch_ops_cost.py --after-window 15
    python3 bench/torch_ops_cost.py --shapes 7
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import torch
from torch.utils import _python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from gpuscope.capture.python.torch_ops import TorchOps

ROUNDS = 15

torch.set_num_threads(1)
A = torch.randn(4, 4)
W = torch.randn(4, 4)
IMG = torch.randn(1, 2, 5, 5)
KER = torch.randn(2, 2, 3, 3)
MODEL = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(128, 128), torch.nn.ReLU())])
OPT = torch.optim.SGD(MODEL.parameters(), lr=1e-3)
X = torch.randn(32, 128)
MLP = torch.nn.Sequential(*[m for _ in range(8) for m in (torch.nn.Linear(64, 64), torch.nn.ReLU())])
X64 = torch.randn(32, 64)
# torch's module-level flags that a mode's __enter__ sets (and gpuscope's install leaves set)
MODE_FLAGS = ("_is_in_torch_dispatch_mode", "_is_in_non_infra_torch_dispatch_mode")


def small_ops() -> None:
    for _ in range(1000):
        torch.add(A, 1.0)
        torch.nn.functional.linear(A, W)
        torch.nn.functional.conv2d(IMG, KER, padding=1)


def mlp() -> None:
    for _ in range(50):
        MLP(X64).sum().backward()


def training() -> None:
    for _ in range(40):
        OPT.zero_grad()
        MODEL(X).square().mean().backward()
        OPT.step()


def training_step() -> None:
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


def _with_flags(flags: dict[str, object], restore: dict[str, object], work: Callable[[], None]) -> None:
    """Run ``work`` with torch's dispatch-mode flags set to ``flags``, then set them to ``restore``:
    as if no mode had ever been installed, whatever the recorder left."""
    for name, value in flags.items():
        setattr(_python_dispatch, name, value)
    try:
        work()
    finally:
        for name, value in restore.items():
            setattr(_python_dispatch, name, value)


def _cpu_time(fn: Callable[[], None]) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def main(rounds: int) -> None:
    before = {name: getattr(_python_dispatch, name) for name in MODE_FLAGS}
    rec = TorchOps(0, lambda level, msg: None)
    rec.install(torch)  # on this thread's stack, and moved on and off it by ``recording``
    installed = {name: getattr(_python_dispatch, name) for name in MODE_FLAGS}
    main_thread = rec._main
    assert main_thread is not None, "the recorder did not take charge of the main thread's stack"
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"torch {torch.__version__}; {rounds} rounds, process CPU time")

    def plain(work: Callable[[], None]) -> None:
        rec.recording = False
        assert _get_current_dispatch_mode() is None
        _with_flags(before, installed, work)

    def off(work: Callable[[], None]) -> None:
        rec.recording = False
        assert _get_current_dispatch_mode() is None, "collection off, yet the mode is on the stack"
        work()

    def pass_through(work: Callable[[], None]) -> None:
        rec.recording = False
        main_thread.enabled = False  # keep the mode on the stack, as on a thread other than the main one
        torch._C._push_on_torch_dispatch_stack(rec.mode)
        try:
            work()
        finally:
            torch._C._pop_torch_dispatch_stack(None)
            main_thread.enabled = True

    def recording(work: Callable[[], None]) -> None:
        rec.recording = True
        assert _get_current_dispatch_mode() is rec.mode
        try:
            work()
        finally:
            rec.recording = False
        rec.take()

    cases = {"plain": plain, "off": off, "pass-through": pass_through, "recording": recording}
    for work in (small_ops, mlp, training):
        ops = _count_ops(work)
        for case in cases.values():  # warm up: plans, signatures, allocator
            case(work)
        times: dict[str, list[float]] = {k: [] for k in cases}
        names = list(cases)
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:  # each case in each place in turn
                gc.collect()  # the garbage of the case before is not this one's cost
                times[name].append(_cpu_time(functools.partial(cases[name], work)))
        base = statistics.median(times["plain"]) / ops
        print(f"{work.__name__}: {ops} operators a run, plain {base * 1e6:.2f} µs per operator")
        for name in list(cases)[1:]:
            extra = [(t - p) / ops * 1e6 for t, p in zip(times[name], times["plain"])]
            print(f"  {name}: {statistics.median(extra):+.2f} µs per operator "
                  f"(range {min(extra):+.2f} to {max(extra):+.2f})")
    print(f"rows recorded: {rec.counts['ops']:,}, failed: {rec.counts['failed']}, mode moves: {main_thread.moves}")


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


def _extra_per_op(times: dict[str, list[float]], ops: int, case: str) -> str:
    extra = [(t - p) / ops * 1e6 for t, p in zip(times[case], times["plain"])]
    return f"{statistics.median(extra):+.2f} µs per operator (range {min(extra):+.2f} to {max(extra):+.2f})"


def after_window(rounds: int) -> None:
    """The sampling recorder once its window is over: extra CPU time per operator against ``plain``."""
    from gpuscope.capture.python.op_sample import RECORDING, WAITING, SamplePolicy

    before = {name: getattr(_python_dispatch, name) for name in MODE_FLAGS}
    rec = TorchOps(0, lambda level, msg: None, SamplePolicy(later_s=0))
    rec.install(torch)
    after = {name: getattr(_python_dispatch, name) for name in MODE_FLAGS}
    steps = 0
    while rec.sample is not None and rec.sample.state in (WAITING, RECORDING):
        training_step()
        steps += 1
        rec.step_mark(steps)
    rec.take()
    calls = [0]
    handler = type(rec.mode).__torch_dispatch__

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return handler(*args, **kwargs)

    type(rec.mode).__torch_dispatch__ = counting
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"torch {torch.__version__}; {rounds} rounds, process CPU time")
    print(f"window over after {steps} steps: {rec.counts['ops']:,} operators recorded "
          f"({rec.sample.windows[0][3] if rec.sample and rec.sample.windows else '-'})")

    def plain(work: Callable[[], None]) -> None:
        _with_flags(before, after, work)

    cases = {"plain": plain, "after the window": lambda work: work()}
    for work in (small_ops, mlp, training):
        ops = _count_ops(work)
        for case in cases.values():
            case(work)
        calls[0] = 0
        times: dict[str, list[float]] = {k: [] for k in cases}
        names = list(cases)
        for r in range(rounds):
            for name in names[r % 2:] + names[:r % 2]:
                gc.collect()
                times[name].append(_cpu_time(functools.partial(cases[name], work)))
        print(f"{work.__name__}: {ops} operators a run, plain {statistics.median(times['plain']) / ops * 1e6:.2f} µs "
              f"per operator; after the window {_extra_per_op(times, ops, 'after the window')}; "
              f"handler calls {calls[0]}")


SHAPES_MODES = {"untraced": None, "torch,host": "torch,host", "torch,host,torch-shapes": "torch,host,torch-shapes",
                "torch,host,torch-ops": "torch,host,torch-ops"}


def _timed(mode: str | None, scratch: str) -> dict[str, float]:
    """One fresh run of the CPU training, profiled with ``mode`` (None: untraced); its own timings."""
    work = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads", "cpu_work.py")
    out = os.path.join(scratch, "t.json")
    cmd = [sys.executable, work, "torch", out]
    if mode is not None:
        cmd = [sys.executable, "-m", "gpuscope", "profile", "-t", mode, "-o", os.path.join(scratch, mode),
               "--force-overwrite", *cmd[1:]]
    subprocess.run(cmd, check=True, capture_output=True)
    with open(out) as fh:
        return dict(json.load(fh))


def shapes(rounds: int) -> None:
    """The four modes end to end, interleaved: the whole run and its last 800 steps, as ratios to untraced."""
    import gpuscope

    whole: dict[str, list[float]] = {m: [] for m in SHAPES_MODES}
    late: dict[str, list[float]] = {m: [] for m in SHAPES_MODES}
    names = list(SHAPES_MODES)
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(rounds):
            for label in names[r % len(names):] + names[:r % len(names)]:
                got = _timed(SHAPES_MODES[label], scratch)
                whole[label].append(got["seconds"])
                late[label].append(got["late_seconds"])
        with gpuscope.load(os.path.join(scratch, "torch,host,torch-shapes.gpuscope")) as report:
            windows = report.sql("SELECT operators, reason FROM torch_op_window")
        with gpuscope.load(os.path.join(scratch, "torch,host,torch-ops.gpuscope")) as report:
            every = report.count("torch_op")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"torch {torch.__version__}; {rounds} rounds, fresh processes, wall time the workload measured")
    print(f"torch-shapes windows: {windows}; torch-ops recorded {every:,} operators")
    print("| mode | whole run (s) | ratio | range | steps 201-1000 (s) | ratio | range |\n| --- | --- | --- | --- | --- | --- | --- |")
    for label in names:
        cells = []
        for t in (whole, late):
            ratios = [a / b for a, b in zip(t[label], t["untraced"])]
            cells.append(f"{statistics.median(t[label]):.3f} | {statistics.median(ratios):.3f} | "
                         f"{min(ratios):.3f} - {max(ratios):.3f}")
        print(f"| {label} | {' | '.join(cells)} |", flush=True)
    for t, what in ((whole, "whole run"), (late, "steps 201-1000")):  # the sampling's own cost
        ratios = [a / b for a, b in zip(t["torch,host,torch-shapes"], t["torch,host"])]
        print(f"torch-shapes over torch,host, {what}: {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f} - {max(ratios):.3f})")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds in-process")
    p.add_argument("--end-to-end", type=int, default=0, metavar="ROUNDS")
    p.add_argument("--after-window", type=int, default=0, metavar="ROUNDS")
    p.add_argument("--shapes", type=int, default=0, metavar="ROUNDS")
    a = p.parse_args()
    if a.after_window:
        after_window(a.after_window)
    elif a.shapes:
        shapes(a.shapes)
    else:
        main(a.rounds)
        if a.end_to_end:
            end_to_end(a.end_to_end)
