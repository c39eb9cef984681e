"""The collectors: what each ``--trace`` value records, and how every in-process recorder is started,
switched, flushed and stopped.

``TRACES`` is the registry of ``--trace`` values: one :class:`TraceOption` each, in the order
``--help`` lists them. Each says what it records (the report's tables), where it runs (inside the
profiled process or beside it, in the launcher), what it implies, and the hint a report stores when
it is off (``meta.not_recorded``; the analyses show it where its data is missing). ``--trace``
parsing, the defaults, the launcher's samplers, the in-process block and the report's
``not_recorded`` are all read from it.

``RECORDERS`` is the registry of what runs inside the profiled process: one :class:`Recorder` each,
in the order the agent starts them. Each names its start function, the ``--trace`` values that
start it, when it starts (at process start, or when the program imports a module such as torch) and
when it stops at the end. The agent (capture/process/agent.py) drives them all through the same
lifecycle and knows none by name; see :class:`Collector`.

Adding a collector: a module with the recorder and its ``start(ctx, module)``, one :class:`Recorder`
line here (and a :class:`TraceOption` if it has a ``--trace`` value of its own), its tables in
trace/schema.py.
"""

from __future__ import annotations

import ctypes
import importlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from ..errors import GpuscopeError

Row = tuple[Any, ...]


class Collector(Protocol):
    """A recorder inside the profiled process: what a :class:`Recorder`'s start function returns.

    Two methods every collector has; the agent calls them from any thread:

    - ``set_collecting(on)``: the capture window's state (off: calls pass straight through);
    - ``take_rows()``: the rows recorded since the last call, by report table (every flush).

    Optional, where a collector needs them (the agent looks each up):

    - ``flush()``: at every flush, before ``take_rows``: have the source hand over what it holds
      (CUPTI's buffers go straight to the spool);
    - ``ending()``: the process ends, before the capture window's last close (an operator sample
      window ends at ``process end``, not at the window's end);
    - ``shutdown(ctx)``: stop, and add the last rows with ``ctx.add_row`` (in the order of
      :attr:`Recorder.stops`);
    - ``uninstall()``: a profiled block ends: put back what it installed in the process.

    None of them may raise into the program: they report a failure with ``ctx.diag`` (the agent
    catches what still escapes and says which collector it came from).
    """

    def set_collecting(self, on: bool) -> None:
        """Record (``on``) or let calls pass straight through, outside a capture window."""

    def take_rows(self) -> dict[str, list[Row]]:
        """Return the rows recorded since the last call, by report table."""
        ...


class Context(Protocol):
    """What a collector gets from the agent of its process (``ctx``)."""

    trace: set[str]  # the --trace values of this run
    clock_offset_ns: int  # the session clock minus CLOCK_MONOTONIC
    stacks: Any  # the process's interned Python stacks (python/stacks.py), shared by its collectors
    spool: Any  # the spool writer (spool.py), for collectors that write chunks of their own

    def now_ns(self) -> int:
        """Return the current time on the session clock."""
        ...

    def diag(self, level: str, message: str) -> None:
        """Record a one-line diagnostic (the launcher prints it and stores it in the report)."""

    def add_row(self, table: str, row: Row) -> None:
        """Add one row of a report table to the next flush."""

    def collector(self, name: str) -> Any:
        """Return the collector of the :class:`Recorder` named ``name`` if it has started, else None."""

    def use_clock(self, name: str, now: Callable[[], int]) -> None:
        """Make ``now`` (ns) the session clock (CUPTI's); collectors started later get its offset."""

    def when_imported(self, module: str, hook: Callable[[ModuleType], None]) -> None:
        """Call ``hook(module)`` once the program has imported ``module`` (now, if it has)."""


# (ctx, module) -> the collector, or None where it has nothing to record (said with ctx.diag).
# ``module`` is the module named by Recorder.when, None for a recorder started with the process.
StartFn = Callable[[Context, "ModuleType | None"], "Collector | None"]

# When a collector's ``shutdown`` runs at the process's end: by these phases, first to last, and
# within a phase in the reverse of the order the collectors started (a subscriber before its source).
STOP_THREAD = 0  # a thread of its own (the sampler): stopped while the agent's flush thread still runs
STOP_CUPTI = 1  # CUPTI and its subscribers, before the Python recorders measure their own costs
STOP_PYTHON = 2
STOP_LAST = 3  # the range recorder: its row counts the ranges the other recorders opened


@dataclass(frozen=True)
class Recorder:
    """One collector that runs inside the profiled process."""

    name: str  # how the others find it (ctx.collector)
    start: str | StartFn  # the function, or the module (under gpuscope.capture) whose ``start`` it is
    traces: tuple[str, ...] = ()  # started when any of these is traced; () always
    when: str | None = None  # None: at process start; a module name: once the program imports it
    stops: int = STOP_PYTHON

    def wanted(self, trace: Collection[str]) -> bool:
        """Return whether a run with ``trace`` starts this recorder."""
        return not self.traces or any(t in trace for t in self.traces)

    def start_function(self) -> StartFn:
        """Return the start function (importing its module now, not when the registry is read)."""
        if not isinstance(self.start, str):
            return self.start
        module = importlib.import_module(f"{__package__}.{self.start}")
        fn: StartFn = module.start
        return fn


_CUPTI = ("cuda", "cuda-api", "nvtx")
RECORDERS = [
    Recorder("cuda", "cupti.activity", _CUPTI, stops=STOP_CUPTI),
    Recorder("cuda-callbacks", "cupti.callbacks", _CUPTI, stops=STOP_CUPTI),
    Recorder("sync-sites", "cupti.sync_sites", ("cuda",)),
    Recorder("graph-launches", "cupti.graph_launches", ("cuda",)),
    Recorder("graph-level", "cupti.graph_level", ("cuda",)),
    Recorder("launch-anchors", "cupti.launch_anchors", ("cuda",), stops=STOP_CUPTI),
    Recorder("ranges", "python.ranges", stops=STOP_LAST),
    Recorder("ranks", "python.ranks"),
    Recorder("forks", "python.forks"),
    Recorder("nvtx-python", "python.nvtx_python", ("nvtx",), when="nvtx"),
    Recorder("torch", "python.torch_hooks", ("torch",), when="torch"),
    Recorder("torch-ops", "python.torch_ops", ("torch-ops", "torch-shapes"), when="torch"),
    Recorder("memory", "python.memory", ("memory",), when="torch"),
    Recorder("sampler", "python.sampler", ("cpu",), stops=STOP_THREAD),
]


@dataclass(frozen=True)
class TraceOption:
    """One ``--trace`` value."""

    name: str
    help: str  # one line of ``profile --help``; what it costs is in docs/costs.md, not here
    tables: tuple[str, ...] = ()  # what it adds to the report
    side: str = "process"  # "process": runs in the profiled process; "launcher": samples it from outside
    needs_gpu: bool = False  # left out of the default without an NVIDIA driver
    implies: tuple[str, ...] = ()  # values it needs: cuda is inserted first, any other right before it
    hint_key: str | None = None  # the key of its hint in meta.not_recorded
    hint: str = ""  # what is missing without it
    # When its hint applies; default: when the option is not in the trace.
    hint_when: Callable[[list[str]], str | None] | None = None

    def not_recorded(self, trace: list[str]) -> str | None:
        """Return the hint the report stores for this option with ``trace`` (None: nothing missing)."""
        if self.hint_key is None:
            return None
        if self.hint_when is not None:
            return self.hint_when(trace)
        return self.hint if self.name not in trace else None


def _torch_backward_hint(trace: list[str]) -> str | None:
    if "torch" in trace and "torch-backward" not in trace:
        return "per-module backward ranges (backward columns of layer_sum): add --trace torch-backward"
    return None


def _torch_ops_hint(trace: list[str]) -> str | None:
    if "torch-ops" in trace:
        return None
    if "torch-shapes" in trace:
        return ("every PyTorch operator (op_sum shows those of the sample windows of --trace torch-shapes only): "
                "add --trace torch-ops")
    return "PyTorch operators with their shapes (op_sum): add --trace torch-ops"


TRACES = [
    TraceOption("cuda", "kernels, copies, sets, host synchronizations, devices (CUPTI)",
                ("kernel", "kernel_config", "memcpy", "memset", "sync", "device", "context", "overhead",
                 "sync_site", "launch_call"), needs_gpu=True, hint_key="cuda", hint="GPU activity: add --trace cuda"),
    TraceOption("cuda-graph", "each CUDA graph launch as one operation, from the start",
                ("graph_launch",), needs_gpu=True, implies=("cuda",)),
    TraceOption("graph-nodes", "every kernel of every CUDA graph, however large",
                ("kernel",), needs_gpu=True, implies=("cuda",)),
    TraceOption("cuda-api", "every CUDA runtime and driver API call (CUPTI)",
                ("api_call",), needs_gpu=True, implies=("cuda",), hint_key="cuda_api",
                hint="CUDA API calls and CUPTI's synchronization records (cuda_api_sum, API time in "
                     "cuda_kern_exec_sum; host waits are in sync_sum): add --trace cuda-api"),
    TraceOption("nvtx", "NVTX ranges and marks of any library (torch.cuda.nvtx, C/C++)",
                ("nvtx_range",), needs_gpu=True, hint_key="nvtx", hint="NVTX ranges: add --trace nvtx"),
    TraceOption("torch", "PyTorch module forwards, optimizer, DataLoader waits, steps",
                ("nvtx_range",), hint_key="torch",
                hint="PyTorch module, optimizer and step ranges: add --trace torch"),
    TraceOption("torch-backward", "each PyTorch module's backward too (autograd hooks)",
                ("nvtx_range",), implies=("torch",), hint_key="torch_backward", hint_when=_torch_backward_hint),
    TraceOption("torch-ops", "every PyTorch operator with its shapes, dtypes and arguments",
                ("torch_op",), hint_key="torch_ops", hint_when=_torch_ops_hint),
    TraceOption("torch-shapes", "PyTorch operators as torch-ops, in short sample windows only",
                ("torch_op", "torch_op_window"), needs_gpu=True),
    TraceOption("cpu", "Python stacks of every thread at 250 Hz, threads' CPU time",
                ("cpu_sample", "cpu_stack", "cpu_frame", "thread_time"), hint_key="cpu",
                hint="Python stack samples (cpu_hotspots): add --trace cpu"),
    TraceOption("memory", "PyTorch and CUDA allocations and frees, memory peaks",
                ("memory_event", "memory_oom"), hint_key="memory",
                hint="allocations, frees and the program's own memory peak (memory_sum): add --trace memory"),
    TraceOption("host", "CPU, memory and threads of the program, read from outside it",
                ("host_counter",), side="launcher"),
    TraceOption("nvml", "GPU utilization, memory, power, clocks, PCIe (NVML, outside)",
                ("host_counter",), side="launcher", needs_gpu=True),
    TraceOption("none", "no collector: the program's process record only", side="none"),
]
BY_NAME = {t.name: t for t in TRACES}
KNOWN_TRACES = {t.name: t.help for t in TRACES}
DEFAULT_TRACE = ["cuda", "nvtx", "torch", "torch-shapes", "host", "nvml"]
# Without an NVIDIA driver the default keeps what needs none, and adds the CPU side.
# Operators in sample windows, not all of them: every operator through PyTorch's Python dispatch made small
# training loops 2.5-4x slower (bench/RESULTS.md).
CPU_EXTRA = ["torch-shapes", "cpu"]
# ``gpuscope.profile()`` blocks: no launcher beside the program, so no host or NVML counters.
BLOCK_DEFAULT_GPU = ["cuda", "nvtx", "torch", "torch-shapes"]
BLOCK_DEFAULT_CPU = ["torch", "cpu"]


def gpu_present() -> bool:
    """Return whether this machine has an NVIDIA driver (libcuda loads); creates no CUDA context."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def parse_trace(spec: str | None) -> list[str]:
    """Return the collectors named in a ``--trace`` value, checking each name."""
    if spec is None:
        return list(DEFAULT_TRACE)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        known = ", ".join(sorted(BY_NAME))
        raise GpuscopeError(f"unknown --trace value {','.join(unknown) or spec!r}; choose from {known}")
    if "none" in names:
        return []
    for option in TRACES:
        for needed in option.implies:
            if option.name in names and needed not in names:
                at = 0 if needed == "cuda" else names.index(option.name)
                names.insert(at, needed)
    if "torch-ops" in names and "torch-shapes" in names:  # every operator, not samples of them
        names.remove("torch-shapes")
    return names


def cpu_only(trace: list[str], distributed: bool = False) -> list[str]:
    """Return the default ``trace`` for a machine without an NVIDIA driver. For a ``distributed``
    job (torchrun, mpirun, srun) every operator is recorded (``torch-ops``): without NCCL kernels,
    the collectives of each step are known only from PyTorch's c10d operators, which operator
    samples would see in their windows alone."""
    out = [t for t in trace if not BY_NAME[t].needs_gpu] + CPU_EXTRA
    if distributed:
        out = ["torch-ops" if t == "torch-shapes" else t for t in out]
    return out


DISTRIBUTED_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "mpirun", "mpiexec",
                         "srun")


def is_distributed(command: list[str]) -> bool:
    """Whether ``command`` starts a distributed job: a launcher among its first words (``torchrun``,
    ``python -m torch.distributed.run``, ``mpirun``, ``srun``)."""
    words = [w.rsplit("/", 1)[-1] for w in command[:4]]
    return any(w in DISTRIBUTED_LAUNCHERS for w in words)


def in_process(trace: list[str]) -> list[str]:
    """Return the values of ``trace`` that run inside the profiled process (a block has no launcher)."""
    return [t for t in trace if BY_NAME[t].side != "launcher"]


def not_recorded(trace: list[str]) -> dict[str, str]:
    """Return ``meta.not_recorded`` for a run with ``trace``: what is missing, and the value that adds it."""
    out = {}
    for option in TRACES:
        hint = option.not_recorded(trace)
        if hint is not None and option.hint_key is not None:
            out[option.hint_key] = hint
    return out
