"""Shared harness of the validation programs: their variants, the plain run, and the measurement.

A program (``bmm_loop.py``, ``mlp_adam.py``, ...) is an ordinary PyTorch script: run plainly it
builds the variant *as written* and runs it for a fixed number of iterations, with no profiler
import and no step marks of its own (programs with an optimizer get PyTorch's ``optimizer.step``).
It also declares candidate fixes, each with the diagnosis rules whose finding would name it:

    python tests/workloads/bmm_loop.py                          # as written, as a user runs it
    python tests/workloads/bmm_loop.py --variant bmm            # one fix, the same way
    python tests/workloads/bmm_loop.py --measure --rounds 5 --timing-out bmm_loop.json

``--measure`` builds every variant up front (CUDA graphs captured, compiled functions warmed), then
times them interleaved in one process, ``A B C A B C ...``: each round runs a few untimed
iterations of a variant and then times ``--iterations`` of them between two
``torch.cuda.synchronize()`` calls, so the per-iteration time is the wall time over the count,
whichever of host and GPU is the bottleneck. ``--device cpu --quick`` runs tiny sizes on a machine
without a GPU (variants that need CUDA, such as CUDA graphs, are skipped there).

The plain run also times its steady state: after ``--warmup`` untimed iterations (default the
program's warm-up) it times the remaining ones between two waits for the device, and
``--timing-out`` gets ``steady_s_per_iteration`` and ``iterations_timed`` (and, where the program
used ``torch.compile``, dynamo's counters: frames compiled, graph breaks, recompiles), so that plain
and traced runs of one program compare per iteration, without their start-up.

A program whose work is not PyTorch's (JAX, CuPy) declares its own ``sync``: it is given the last
iteration's return value and waits for that work (``block_until_ready``, a stream synchronize);
without one the harness waits with ``torch.cuda.synchronize()``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, TypeVar

import torch

T = TypeVar("T")
Step = Callable[[], object]

AS_WRITTEN = "as_written"
REWARM = 3  # untimed iterations of a variant at the start of each of its rounds


@dataclass(frozen=True)
class Variant:
    """One way to write the program: the one as written (first) or a candidate fix.

    ``rules``: the diagnosis rules whose finding names this fix. ``work_changing``: the fix changes
    the work of an iteration (a larger batch), so it is compared per sample; ``samples``: samples
    per iteration at full size. ``needs_cuda``: left out on a CPU run (CUDA graphs).
    """

    name: str
    description: str
    rules: tuple[str, ...] = ()
    work_changing: bool = False
    samples: int = 1
    needs_cuda: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Return the declaration as plain data."""
        return {"description": self.description, "rules": list(self.rules), "work_changing": self.work_changing,
                "samples_per_iteration": self.samples, "needs_cuda": self.needs_cuda}


@dataclass(frozen=True)
class Setup:
    """Where and how big a program runs: its device, and ``quick`` for tiny sizes (smoke tests)."""

    device: torch.device
    quick: bool = False

    @property
    def cuda(self) -> bool:
        """Whether the program runs on a GPU."""
        return self.device.type == "cuda"

    def pick(self, full: T, quick: T) -> T:
        """Return ``quick`` for a smoke test, ``full`` otherwise."""
        return quick if self.quick else full

    def sync(self) -> None:
        """Wait for the GPU (nothing on a CPU)."""
        if self.cuda:
            torch.cuda.synchronize()


@dataclass(frozen=True)
class Program:
    """A validation program: what it is, its variants (the one as written first), how to build them.

    ``build(variant, setup)`` returns the function of one iteration. ``iterations``: of the plain run
    (warm-up included: enough for 50 steady ones); ``measure_iterations``: timed per round;
    ``warmup``: untimed iterations of each variant after it is built. ``nothing_to_fix``: no finding
    should save more than 5%. ``marks``: step marks the program makes by itself (``none``, or
    ``optimizer``: PyTorch's ``optimizer.step``). ``sync(out)``: waits for the device work of the
    iterations run so far, given the last iteration's return value (None: ``torch.cuda.synchronize()``
    on a GPU, nothing on a CPU).
    """

    name: str
    description: str
    variants: tuple[Variant, ...]
    build: Callable[[str, Setup], Step]
    iterations: int
    measure_iterations: int
    warmup: int = 10
    nothing_to_fix: bool = False
    marks: str = "none"
    sync: Callable[[object], None] | None = None

    @property
    def as_written(self) -> Variant:
        """The variant the plain run runs."""
        return self.variants[0]

    @property
    def fixes(self) -> tuple[Variant, ...]:
        """The candidate fixes."""
        return self.variants[1:]

    def variant(self, name: str) -> Variant:
        """The variant named ``name``; KeyError when there is none."""
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"{self.name} has no variant {name!r}; it has {', '.join(v.name for v in self.variants)}")


def wait(program: Program, setup: Setup, out: object = None) -> None:
    """Wait for the work of ``program``'s iterations so far: its own ``sync`` (given ``out``, the last
    iteration's return value), else the GPU's."""
    if program.sync is not None:
        program.sync(out)
    else:
        setup.sync()


def compile_counters() -> dict[str, int] | None:
    """Dynamo's counters summed to a few integers, or None where ``torch.compile`` was not used:
    frames seen and compiled, graphs, graph breaks, and recompiles (guard failures)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    counters = getattr(utils, "counters", {})
    frames = counters.get("frames", {})
    if not frames.get("total"):
        return None
    failures = getattr(utils, "guard_failures", {}) or {}
    recompiles = sum(len(v) for v in failures.values()) + sum(counters.get("recompiles", {}).values())
    return {"frames_total": int(frames.get("total", 0)), "frames_compiled": int(frames.get("ok", 0)),
            "unique_graphs": int(counters.get("stats", {}).get("unique_graphs", 0)),
            "graph_breaks": int(sum(counters.get("graph_break", {}).values())), "recompiles": int(recompiles)}


def need(module: str, package: str | None = None) -> ModuleType:
    """Import ``module``; where it is not installed, exit with one line saying so (``package``: the
    name to install it by, default the module's top-level name)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        sys.exit(f"this program needs {package or module.split('.')[0]}, which is not installed ({exc})")


def gpu_only(setup: Setup, what: str) -> None:
    """Exit with one line (status 0) where ``setup`` is not a GPU: for programs whose library runs only there."""
    if not setup.cuda:
        print(f"{what} runs on a CUDA GPU only: skipped on the CPU")
        sys.exit(0)


def python_work(seconds: float) -> int:
    """Run Python bytecode for ``seconds``: host work of a known length (logging, bookkeeping, metrics)."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def capture(fn: Callable[[], T], before: Callable[[], object] | None = None, warmup: int = 3) -> Callable[[], T]:
    """Capture one call of ``fn`` in a CUDA graph; return a function that replays it and returns ``fn``'s outputs.

    ``fn`` first runs ``warmup`` times on a side stream, as capture requires. ``before`` runs before
    each of those calls and once before the capture: ``optimizer.zero_grad(set_to_none=True)`` for a
    training step, so that the captured backward allocates the gradients in the graph's memory.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            if before is not None:
                before()
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    if before is not None:
        before()
    with torch.cuda.graph(graph):
        out = fn()

    def replay() -> T:
        graph.replay()
        return out

    return replay


def graphed_training(train_step: Callable[[torch.Tensor, torch.Tensor], T], optimizer: torch.optim.Optimizer,
                     example: tuple[torch.Tensor, torch.Tensor],
                     batches: Iterator[tuple[torch.Tensor, torch.Tensor]]) -> Callable[[], T]:
    """A whole training step, ``train_step(x, y)`` (forward, backward, optimizer step), captured in
    one CUDA graph on static inputs (copies of ``example``); return a step that copies the next
    batch into them, replays the graph and returns ``train_step``'s outputs. The gradients are set
    to None before the capture, so that the captured backward allocates them in the graph's memory."""
    static_x, static_y = (t.clone() for t in example)
    replay = capture(lambda: train_step(static_x, static_y), before=lambda: optimizer.zero_grad(set_to_none=True))

    def step() -> T:
        x, y = next(batches)
        static_x.copy_(x)
        static_y.copy_(y)
        return replay()

    return step


def parser(program: Program) -> argparse.ArgumentParser:
    """The command line of a program."""
    p = argparse.ArgumentParser(description=program.description)
    p.add_argument("--variant", default=AS_WRITTEN, choices=[v.name for v in program.variants],
                   help="plain run of this variant (default: as written)")
    p.add_argument("--iterations", type=int, help="iterations of the plain run, or timed per round with --measure")
    p.add_argument("--measure", action="store_true", help="time every variant, interleaved, in this process")
    p.add_argument("--rounds", type=int, default=5, help="rounds of --measure")
    p.add_argument("--warmup", type=int,
                   help="untimed iterations of each variant after it is built (--measure), or before the steady "
                        "iterations of the plain run (default the program's)")
    p.add_argument("--timing-out", help="write the timing (JSON) here")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="where to run (default cuda)")
    p.add_argument("--quick", action="store_true", help="tiny sizes and few iterations: a smoke test")
    return p


def _setup(device: str, quick: bool) -> Setup:
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("this program needs a CUDA GPU (or --device cpu --quick for a smoke test)")
    return Setup(torch.device(device), quick)


def _device_name(setup: Setup) -> str:
    return torch.cuda.get_device_name() if setup.cuda else f"CPU ({platform.processor() or platform.machine()})"


def run_plain(program: Program, setup: Setup, variant: str = AS_WRITTEN, iterations: int | None = None) -> float:
    """Build one variant and run it ``iterations`` times, as a user's script would; return the wall seconds."""
    return run_steady(program, setup, variant, iterations)["wall_s"]


def run_steady(program: Program, setup: Setup, variant: str = AS_WRITTEN, iterations: int | None = None,
               warmup: int | None = None) -> dict[str, Any]:
    """Build one variant and run it ``iterations`` times, as a user's script would, timing the steady part.

    The first ``warmup`` iterations (default the program's, 2 with ``quick``; at most all but one) run
    untimed; the rest are timed between two waits for the device. Returns ``wall_s`` (build and every
    iteration), ``steady_s_per_iteration``, ``iterations_timed``, ``warmup`` and ``compile`` (dynamo's
    counters, None without ``torch.compile``).
    """
    if program.variant(variant).needs_cuda and not setup.cuda:
        sys.exit(f"variant {variant} of {program.name} needs CUDA")
    n = iterations or (5 if setup.quick else program.iterations)
    w = warmup if warmup is not None else (2 if setup.quick else program.warmup)
    w = max(0, min(w, n - 1))
    t0 = time.perf_counter()
    step = program.build(variant, setup)
    out: object = None
    for _ in range(w):
        out = step()
    wait(program, setup, out)
    t1 = time.perf_counter()
    for _ in range(n - w):
        out = step()
    wait(program, setup, out)
    t2 = time.perf_counter()
    timed = n - w
    return {"wall_s": t2 - t0, "steady_s_per_iteration": (t2 - t1) / timed if timed else None,
            "iterations_timed": timed, "warmup": w, "compile": compile_counters()}


def measure(program: Program, setup: Setup, rounds: int, iterations: int, warmup: int) -> dict[str, Any]:
    """Time every variant of ``program`` interleaved (``A B C A B C ...``); return the timing document.

    Per variant: the per-iteration seconds of each round (``round_s``), their median, min, max and
    spread ((max - min) / median), and the median per sample.
    """
    variants = [v for v in program.variants if setup.cuda or not v.needs_cuda]
    steps: dict[str, Step] = {}
    build_s: dict[str, float] = {}
    failed: dict[str, str] = {}
    for v in variants:
        t0 = time.perf_counter()
        try:
            steps[v.name] = program.build(v.name, setup)
            out: object = None
            for _ in range(warmup):
                out = steps[v.name]()
            wait(program, setup, out)
        except Exception as exc:  # noqa: BLE001  (a fix that cannot run here is reported, the others measured)
            failed[v.name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            print(f"{program.name} {v.name}: failed to build: {failed[v.name]}", file=sys.stderr)
            steps.pop(v.name, None)
            try:
                wait(program, setup)
            except Exception:  # noqa: BLE001  (the failed variant's work may not be waited for)
                pass
            continue
        build_s[v.name] = time.perf_counter() - t0
    variants = [v for v in variants if v.name in steps]
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    for _ in range(rounds):
        for v in variants:
            step = steps[v.name]
            out = None
            for _ in range(min(REWARM, warmup)):
                out = step()
            wait(program, setup, out)
            t0 = time.perf_counter()
            for _ in range(iterations):
                out = step()
            wait(program, setup, out)
            times[v.name].append((time.perf_counter() - t0) / iterations)
    out: dict[str, Any] = {}
    for v in program.variants:
        doc = {**v.as_dict(), "as_written": v is program.as_written}
        if v.name in times:
            t = times[v.name]
            med = statistics.median(t)
            doc.update(round_s=t, median_s=med, min_s=min(t), max_s=max(t),
                       spread=(max(t) - min(t)) / med if med else 0.0, per_sample_s=med / v.samples,
                       build_s=round(build_s[v.name], 3))
        else:
            doc["skipped"] = failed.get(v.name, f"needs CUDA, ran on {setup.device.type}")
        out[v.name] = doc
    return {
        "program": program.name,
        "description": program.description,
        "device": _device_name(setup),
        "torch": torch.__version__,
        "quick": setup.quick,
        "rounds": rounds,
        "iterations": iterations,
        "warmup": warmup,
        "nothing_to_fix": program.nothing_to_fix,
        "marks": program.marks,
        "as_written": program.as_written.name,
        "variants": out,
    }


def main(program: Program, argv: list[str] | None = None) -> None:
    """The program's command line: a plain run of one variant, or ``--measure`` of all of them."""
    args = parser(program).parse_args(argv)
    setup = _setup(args.device, args.quick)
    if args.measure:
        iterations = args.iterations or (3 if args.quick else program.measure_iterations)
        warmup = args.warmup if args.warmup is not None else (2 if args.quick else program.warmup)
        doc = measure(program, setup, args.rounds, iterations, warmup)
        for name, v in doc["variants"].items():
            if "median_s" in v:
                print(f"{program.name} {name}: {v['median_s'] * 1e3:.3f} ms per iteration "
                      f"(median of {args.rounds}, spread {v['spread']:.1%})")
            else:
                print(f"{program.name} {name}: skipped ({v['skipped']})")
    else:
        n = args.iterations or (5 if args.quick else program.iterations)
        run = run_steady(program, setup, args.variant, n, args.warmup)
        doc = {"program": program.name, "variant": args.variant, "device": _device_name(setup),
               "iterations": n, **run}
        steady = run["steady_s_per_iteration"]
        print(f"{program.name} ({args.variant.replace('_', ' ')}): {n} iterations in {run['wall_s']:.2f} s"
              + (f", {steady * 1e3:.3f} ms per steady iteration" if steady is not None else ""))
    if args.timing_out:
        with open(args.timing_out, "w") as fh:
            json.dump(doc, fh, indent=1)
