"""The in-process agent: started by the bootstrap before any user code of a profiled Python process.

It reads its settings from the environment the launcher prepared, starts the collectors, flushes
what they hold to the spool every ``FLUSH_INTERVAL_S`` (and soon after a capture window closes), and
delivers everything at exit and on SIGTERM. A capture range (``GPUSCOPE_CAPTURE``) turns collection
on and off meanwhile (control.py). Standard library only, apart from the collectors' own
optional imports.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from ... import annotation
from ...spool import SPOOL_ENV, SpoolWriter
from ..capture_range import CAPTURE_ENV, CaptureSpec
from ..collectors import Collector
from ..cupti.activity import CollectorUnavailable, CuptiCollector, explain
from ..python import hook_cost as calibrate
from ..python import imports
from ..python.forks import ForkWatch
from ..python.ranges import RangeRecorder
from ..python.ranks import RankRecorder
from ..python.stacks import StackTable
from .control import CaptureControl

TRACE_ENV = "GPUSCOPE_TRACE"
SAMPLE_RATE_ENV = "GPUSCOPE_SAMPLE_HZ"
SYNC_SITES_ENV = "GPUSCOPE_SYNC_SITES"  # "0": no synchronization sites (for measuring their cost)
LAUNCHER_ENV = "GPUSCOPE_LAUNCHER"  # the pid of the launcher that reads the spool
# Signals whose default action ends the process: the agent delivers everything first (if the program
# left them to their default), and while it delivers, a second one waits (SIGINT is ignored).
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
MEMORY_ENTRIES_ENV = "GPUSCOPE_MEMORY_ENTRIES"  # the CUDA allocator's ring of actions (cuda_memory.py)
DEFAULT_SAMPLE_HZ = 250  # 1 kHz cost 1.27x on a small CPU training loop, 250 Hz 1.09x (bench/RESULTS.md)
FLUSH_INTERVAL_S = 0.5

_agent: Agent | None = None


class Agent:
    """Owns the spool writer and the collectors of one process."""

    def __init__(self, spool_dir: str, trace: set[str], capture: CaptureSpec | None = None) -> None:
        self.trace = trace
        self.spool = SpoolWriter(spool_dir)
        self.cupti: CuptiCollector | None = None
        self.callbacks: Any = None  # the CUPTI callback subscriber (cupti_callbacks.CallbackHub)
        self.sync_sites: Any = None
        self.graph_launches: Any = None
        self.launch_anchors: Any = None
        self._anchor_cost: dict[str, int] = {}
        self.stacks = StackTable()
        self.ranges = RangeRecorder()
        self.ranks = RankRecorder()
        self.torch_hooks: Any = None
        self.torch_ops: Any = None  # torch_ops.TorchOps, with --trace torch-ops or torch-shapes
        self.sampler: Any = None
        self.memory: list[Any] = []  # the memory recorders (torch_memory, cuda_memory), with --trace memory
        self.collectors: list[Collector] = []  # every recorder started, in the order started
        self.clock = "monotonic"
        self.clock_offset_ns = 0
        self._rows: dict[str, list[tuple[Any, ...]]] = {}
        self._rows_lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._pending_signal: int | None = None
        self.flush_thread_ns = 0  # the flush thread's CPU time, read after each flush
        self._launcher = _Launcher.from_env()
        self._pid = os.getpid()
        self.capture = CaptureControl(self, capture or CaptureSpec())

    # -- public ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the collectors and the flush thread, and hook process exit."""
        if self.trace & {"cuda", "cuda-api", "nvtx"}:
            self._start_cupti()
        self.ranges.offset = self.clock_offset_ns
        self.collectors.append(self.ranges)
        self.collectors.append(self.ranks)
        self.forks = ForkWatch(self.now_ns)  # forked children are not recorded: say so
        self.forks.install()
        self.collectors.append(self.forks)
        annotation.use_recorder(self.ranges)
        self._hook_libraries()
        if "cpu" in self.trace:
            self._start_sampler()
        self.capture.start()
        self._add_row("process", self._process_row())
        self.flush()
        self._thread = threading.Thread(target=self._flush_loop, name="gpuscope-flush", daemon=True)
        self._thread.start()
        atexit.register(self.stop)
        self._hook_ending_signals()
        os.register_at_fork(after_in_child=_forget_in_child)

    def now_ns(self) -> int:
        """Return the current time on the session clock."""
        return time.monotonic_ns() + self.clock_offset_ns

    def diag(self, level: str, message: str) -> None:
        """Record a one-line diagnostic; the launcher prints it and stores it in the report."""
        self._add_row("diagnostic", (self.now_ns(), level, message))
        if level == "error":
            self.flush_rows()

    def flush(self) -> None:
        """Hand every record collected so far to the spool."""
        if self.cupti is not None:
            try:
                self.cupti.flush()
            except Exception as exc:  # noqa: BLE001
                self._add_row("diagnostic", (self.now_ns(), "warning", f"CUPTI flush failed: {exc}"))
        self.flush_rows()

    def flush_rows(self) -> None:
        taken = [c.take_rows() for c in list(self.collectors)]  # a hook may add one meanwhile
        with self._rows_lock:
            rows, self._rows = self._rows, {}
        for collected in taken:
            for table, items in collected.items():
                rows.setdefault(table, []).extend(items)
        for table, items in self.stacks.take().items():  # after the rows that refer to them
            rows.setdefault(table, []).extend(items)
        if rows:
            self.spool.write(rows=rows)

    def stop(self) -> None:
        """Deliver everything and stop the collectors; safe to call more than once. A Ctrl-C while
        it runs is ignored and a SIGTERM or SIGHUP waits for it (see :meth:`_hook_ending_signals`)."""
        if self._stopped or os.getpid() != self._pid:
            return
        self._stopped = True
        if self._launcher is not None and self._launcher.gone():
            self._orphaned()
        held = _hold_sigint()
        try:
            self._deliver()
        finally:
            _release_sigint(held)

    def _deliver(self) -> None:
        if self.torch_ops is not None:
            self.torch_ops.end_sample()  # a sample window still open ends at the process's end
        self.capture.finish()
        self._stop_event.set()
        self.capture.flush_soon.set()
        if self.sampler is not None:
            self.sampler.stop()
            detail = {"hz": round(1.0 / self.sampler.interval, 3), "held_ns": self.sampler.held_ns,
                      "interval_ns": int(self.sampler.interval * 1e9)}
            self._add_row("collector", ("sampler", self.sampler.samples, 0, self.sampler.busy_ns, 0,
                                        json.dumps(detail, sort_keys=True)))
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)  # no flush may race CUPTI's detaching
        if self.flush_thread_ns:  # its CPU time while the program ran: it holds the GIL while it works
            self._add_row("collector", ("flush", 0, 0, self.flush_thread_ns, 0, ""))
        self._calibrate_anchors()
        if self.callbacks is not None:
            try:
                self.callbacks.stop()
            except Exception as exc:  # noqa: BLE001
                self._add_row("diagnostic", (self.now_ns(), "warning", f"CUPTI callbacks did not stop: {exc}"))
        if self.cupti is not None:
            try:
                self.cupti.stop()
            except Exception as exc:  # noqa: BLE001
                self._add_row("diagnostic", (self.now_ns(), "error", f"CUPTI stop failed: {exc}"))
            self._add_row("collector", self._collector_row())
        for row in self.ranges.close_open():
            self._add_row("range", row)
        if self.torch_ops is not None:
            self._add_row("collector", self._operator_row(self.torch_ops.stop()))
        for recorder in self.memory:
            recorder.finish()
            self._add_row("collector", recorder.summary())
        self._report_range_counts()
        self._add_row("process_end", (self.now_ns(),))
        self.flush_rows()

    # -- internals --------------------------------------------------------------------------
    def _start_cupti(self) -> None:
        collector = CuptiCollector(self.spool, self.trace, self.diag)
        try:
            collector.start()
        except CollectorUnavailable as exc:
            self.diag("warning", f"{exc}: GPU activity is not recorded; the program runs as usual")
            return
        self.cupti = collector
        self.collectors.append(collector)
        self.clock = "cupti"
        self.clock_offset_ns = _offset(collector.now)
        self._start_callbacks(collector)

    def _start_callbacks(self, collector: CuptiCollector) -> None:
        """Subscribe to CUPTI's callback API, and record synchronization sites with ``cuda``."""
        from ..cupti.callbacks import CallbackHub  # noqa: PLC0415

        hub = CallbackHub(collector.cupti_module, self.diag)
        try:
            hub.start()
        except Exception as exc:  # noqa: BLE001  (cupti raises its own error types)
            self.diag("warning", f"synchronization sites are not recorded: {explain(exc)}")
            return
        self.callbacks = hub
        if "cuda" in self.trace and os.environ.get(SYNC_SITES_ENV) != "0":
            from ..cupti.sync_sites import SyncSites  # noqa: PLC0415

            self.sync_sites = SyncSites(hub, self.stacks, self.clock_offset_ns)
            self.collectors.append(self.sync_sites)
            from ..cupti.graph_launches import GraphLaunches  # noqa: PLC0415

            self.graph_launches = GraphLaunches(hub, self.clock_offset_ns)
            self.collectors.append(self.graph_launches)
        if "cuda" in self.trace and "cuda-api" not in self.trace:
            self._start_anchors(hub)

    def _start_anchors(self, hub: Any) -> None:
        """Mark the ends of recorded ranges among CUDA calls (launch_anchors.py)."""
        from ..cupti import launch_anchors  # noqa: PLC0415

        if os.environ.get(launch_anchors.ANCHORS_ENV) == "0":
            return
        try:
            call = launch_anchors.anchor_call()
        except (OSError, AttributeError) as exc:
            self.diag("warning", f"GPU work is placed in ranges by its GPU start only: {exc}")
            return
        anchors = launch_anchors.CallbackAnchors(hub, self.clock_offset_ns)
        if anchors.missing:
            self.diag("warning", "GPU work is placed in ranges by its GPU start only: no CUPTI "
                      f"callback for {launch_anchors.ANCHOR_API}")
            return
        self.launch_anchors = anchors
        self.collectors.append(anchors)
        self.ranges.anchor = call

    def _calibrate_anchors(self) -> None:
        """Measure what one launch anchor costs, while CUPTI still calls back (hook_cost.py)."""
        anchors = self.launch_anchors
        if anchors is None or self.ranges.anchor is None:
            return
        kept = anchors.pending()
        try:
            self._anchor_cost = {"ns_per_anchor": calibrate.anchor_cost_ns(self.ranges.anchor)}
        except Exception as exc:  # noqa: BLE001
            self.diag("info", f"the cost of launch anchors was not measured: {type(exc).__name__}: {exc}")
        anchors.forget_since(kept)

    def _start_sampler(self) -> None:
        from ..python.sampler import Sampler  # noqa: PLC0415

        try:
            hz = float(os.environ.get(SAMPLE_RATE_ENV, DEFAULT_SAMPLE_HZ))
        except ValueError:
            hz = DEFAULT_SAMPLE_HZ
        self.sampler = Sampler(1.0 / max(hz, 1.0), self.clock_offset_ns, self.stacks)
        self.sampler.start()
        self.collectors.append(self.sampler)

    def _hook_libraries(self) -> None:
        hooks: dict[str, list[Any]] = {}
        if "nvtx" in self.trace:
            hooks["nvtx"] = [self._install_nvtx_python]
        if "torch" in self.trace:
            hooks["torch"] = [self._install_torch]
        if "torch-ops" in self.trace or "torch-shapes" in self.trace:  # every operator wins over samples
            hooks.setdefault("torch", []).append(self._install_torch_ops)
        if "memory" in self.trace:
            hooks.setdefault("torch", []).append(self._install_memory)
        hooks.setdefault("torch", []).append(lambda torch: self.ranks.install(torch, self.diag))
        imports.when_imported(hooks, lambda name, exc: self.diag(
            "warning", f"gpuscope could not hook into {name}: {type(exc).__name__}: {exc}"))

    def _install_nvtx_python(self, module: Any) -> None:
        from ..python import nvtx_python  # noqa: PLC0415

        nvtx_python.install(module, self.ranges)

    def _install_torch(self, module: Any) -> None:
        from ..python.torch_hooks import TorchHooks  # noqa: PLC0415

        hooks = TorchHooks(self.ranges, self.diag, backward="torch-backward" in self.trace)
        self.capture.apply_to(hooks)
        hooks.install(module)
        self.torch_hooks = hooks
        self.collectors.append(hooks)

    def _install_torch_ops(self, module: Any) -> None:
        from ..python.op_sample import policy_from_env  # noqa: PLC0415
        from ..python.torch_ops import TorchOps  # noqa: PLC0415

        policy = None if "torch-ops" in self.trace else policy_from_env(self.diag)  # every operator wins
        ops = TorchOps(self.clock_offset_ns, self.diag, policy, lambda *row: self._add_row("torch_op_window", row),
                       self.ranges.anchor)
        ops.install(module)
        self.capture.apply_to(ops)
        self.torch_ops = ops
        self.collectors.append(ops)

    def _install_memory(self, module: Any) -> None:
        """CUDA: the caching allocator's history; without CUDA: the CPU tensors PyTorch operators create."""
        from ..python import cuda_memory  # noqa: PLC0415
        from ..python.torch_memory import TorchMemory  # noqa: PLC0415

        entries = int(os.environ.get(MEMORY_ENTRIES_ENV) or cuda_memory.MAX_ENTRIES)
        cuda = cuda_memory.CudaMemory(self.clock_offset_ns, self.stacks, self.diag, entries)
        recorder: Any = cuda
        if not cuda.install(module):
            recorder = TorchMemory(self.clock_offset_ns, self.stacks, self.diag)
            recorder.install(module)
        self.memory.append(recorder)
        self.capture.apply_to(recorder)
        self.collectors.append(recorder)

    def _operator_row(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        """The operator recorder's ``collector`` row, with the per-operator costs measured now
        (hook_cost.py) in its detail, for the overhead estimate."""
        try:
            info = json.loads(row[5])
            if info.get("ops") or info.get("waited_ops"):
                recorded, passed = calibrate.operator_costs_ns(sys.modules["torch"])
                info.update(ns_per_op_recorded=recorded, ns_per_op_passed=passed)
        except Exception as exc:  # noqa: BLE001  (at exit; the overhead line says it was not measured)
            self.diag("info", f"the cost of recording PyTorch operators was not measured: {type(exc).__name__}: {exc}")
            return row
        return (*row[:5], json.dumps(info, sort_keys=True))

    def _report_range_counts(self) -> None:
        counts = dict(self.ranges.counts)
        if self.torch_hooks is not None:
            counts.update(self.torch_hooks.counts)
        if counts["ranges"]:  # per-call costs, for the overhead estimate (hook_cost.py)
            counts.update(calibrate.costs(self.torch_hooks, self.diag))
            counts.update(self._anchor_cost)
        self._add_row("collector", ("ranges", counts["ranges"], 0, 0, counts["hook_errors"] if
                                    "hook_errors" in counts else 0, json.dumps(counts, sort_keys=True)))
        said = {
            "unbalanced_pops": "range pops without an open range (ignored)",
            "unknown_ends": "range ends of unknown or already ended ranges (ignored)",
            "open_at_exit": "ranges still open when the process ended (kept without an end)",
            "ended_on_other_thread": "ranges ended on another thread than the one that started them",
            "reentrant_calls": "re-entrant calls of a module already running (ranges nested)",
            "modules_with_own_hooks": "modules that already had hooks (theirs run as before)",
            "backward_closed_at_pass_end": ("module backward ranges got no end from PyTorch (no gradient flowed back through "
                                            "the module's inputs, so its backward hook never fired): each was ended with "
                                            "the backward pass, and its backward time in layer_sum runs to that end"),
        }
        closed = self.torch_hooks.closed_at_pass_end() if self.torch_hooks is not None else None
        for key, text in said.items():
            if counts.get(key):
                line = closed if key == "backward_closed_at_pass_end" and closed else f"{counts[key]} {text}"
                self._add_row("diagnostic", (self.now_ns(), "info", line))

    def _process_row(self) -> tuple[Any, ...]:
        return (
            os.getppid(),
            sys.executable,
            json.dumps(_argv()),
            os.getcwd(),
            self.now_ns(),
            None,
            self.clock,
            self.clock_offset_ns,
        )

    def _collector_row(self) -> tuple[Any, ...]:
        c = self.cupti
        assert c is not None
        detail = f"kinds={','.join(c.enabled)} copied_buffers={c.copied_buffers}"
        if c.raw is not None:
            detail += f" raw_buffers={c.raw.buffers_allocated} failed_buffers={c.failed_buffers}"
        detail += f" anchors={'on' if self.launch_anchors is not None else 'off'}"
        if c.verify_walk:
            detail += f" walk_checked={c.walk_checked} walk_mismatches={c.walk_mismatches}"
        return ("cupti", c.records, c.buffers, c.callback_ns, c.failed_records, detail)

    def _add_row(self, table: str, row: tuple[Any, ...]) -> None:
        with self._rows_lock:
            self._rows.setdefault(table, []).append(row)

    def _flush_loop(self) -> None:
        soon = self.capture.flush_soon
        while True:
            soon.wait(FLUSH_INTERVAL_S)
            soon.clear()
            if self._stop_event.is_set():
                self.flush_thread_ns = time.thread_time_ns()
                return
            if self._launcher is not None and self._launcher.gone():
                self._orphaned()
            self.flush()  # to a closed spool once orphaned: what collectors hold is dropped, not kept
            self.flush_thread_ns = time.thread_time_ns()

    def _orphaned(self) -> None:
        """The launcher died (SIGKILL, out of memory): nobody reads the spool any more. Stop writing
        to it, remove it, and stop the sampler; the program runs on untraced."""
        self.spool.closed = True
        self._launcher = None
        if self.sampler is not None:
            self.sampler.stop()
        import shutil  # noqa: PLC0415

        shutil.rmtree(self.spool.directory, ignore_errors=True)

    def _hook_ending_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_signal(signum: int, frame: Any) -> None:
            if self._stopped:  # a delivery is under way: it ends the process when it is done
                if self._pending_signal is None:
                    self._pending_signal = signum
                return
            self.stop()
            signum = self._pending_signal or signum
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        for signum in ENDING_SIGNALS:
            # A program that handles the signal itself exits through atexit, which delivers.
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, on_signal)


def _hold_sigint() -> Any:
    """Ignore SIGINT (on the main thread) and return the handler to put back."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        return signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):
        return None


def _release_sigint(previous: Any) -> None:
    if previous is not None:
        try:
            signal.signal(signal.SIGINT, previous)
        except (ValueError, OSError):
            pass


class _Launcher:
    """Tells whether the launcher that reads this process's spool is still alive (by a pidfd where
    the kernel has them, so a reused pid is not mistaken for it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None = None
        try:
            self.fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.fd = None

    @classmethod
    def from_env(cls) -> _Launcher | None:
        value = os.environ.get(LAUNCHER_ENV, "")
        return cls(int(value)) if value.isdigit() else None

    def gone(self) -> bool:
        """Return whether the launcher has ended."""
        if self.fd is not None:
            import select  # noqa: PLC0415

            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            return bool(poller.poll(0))
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False


def _offset(cupti_now: Any) -> int:
    """Return CUPTI's clock minus CLOCK_MONOTONIC, from the closest of a few paired readings."""
    best: tuple[int, int] | None = None
    for _ in range(5):
        a = time.monotonic_ns()
        c = cupti_now()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, c - (a + b) // 2)
    assert best is not None
    return best[1]


def _argv() -> list[str]:
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            parts = fh.read().split(b"\0")
        return [p.decode("utf-8", "replace") for p in parts if p]
    except OSError:
        return [sys.executable, *sys.argv]


def _forget_in_child() -> None:
    # CUDA and CUPTI do not survive fork; a forked child (DataLoader worker, multiprocessing) is
    # not traced, and must not deliver its parent's state at its exit.
    global _agent
    if _agent is not None:
        _agent._stopped = True
        _agent._stop_event.set()
    _agent = None


def current() -> Agent | None:
    """Return the agent of this process, if it is being profiled."""
    return _agent


def start_from_env() -> Agent | None:
    """Start the agent if the launcher asked for it through the environment; return it."""
    global _agent
    spool = os.environ.get(SPOOL_ENV)
    if not spool or _agent is not None:
        return _agent
    if not os.path.isdir(spool):
        return None  # a process that outlived its profiling session
    trace = {t for t in os.environ.get(TRACE_ENV, "cuda").split(",") if t}
    _agent = Agent(spool, trace, CaptureSpec.from_env(os.environ.get(CAPTURE_ENV)))
    _agent.start()
    return _agent
