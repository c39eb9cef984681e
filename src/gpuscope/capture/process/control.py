"""The capture range inside a profiled process: what starts and stops collection, and what it turns off.

Outside a capture window collection is off, not filtered: CUPTI's activity kinds that grow with the
work (kernels, copies, sets, synchronizations, API calls, NVTX, graphs) are disabled, gpuscope's
range recorder keeps only the bookkeeping that pairs pushes with pops, the PyTorch hooks pass calls
straight through, the Python sampler sleeps, synchronization sites are skipped, and the operator
recorder's dispatch mode leaves the main thread's stack (other threads pass operators through).
Device, context and CUPTI overhead records stay on (they are few). Step marks are always kept, so
steps keep their numbers in any window. Since turning CUPTI on and off is not instantaneous, the
report is also trimmed to the windows when it is written (trace/trim.py).

Triggers: step marks and ranges reach the window through the range recorder's hooks;
``torch.cuda.nvtx`` calls through thin wrappers (NVTX ranges pushed by C/C++ code cannot start
collection: CUPTI reports them only after the fact); cudaProfilerStart/Stop through CUPTI's
callback API; ``gpuscope.start()``/``stop()`` through :meth:`CaptureControl.api`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Protocol

from ..capture_range import CaptureSpec
from ..collectors import Collector
from ..python import imports
from ..python.ranges import RangeRecorder
from .pace_probe import PACE_ENV, PaceProbe
from .window import CaptureWindow

PROFILER_APIS = ["cudaProfilerStart", "cudaProfilerStop", "cuProfilerStart", "cuProfilerStop"]


class Agent(Protocol):
    """What the capture control uses of the process's agent (agent.py)."""

    ranges: RangeRecorder
    collectors: list[Collector]

    def collector(self, name: str) -> Any: ...

    def now_ns(self) -> int: ...

    def diag(self, level: str, message: str) -> None: ...

    def _add_row(self, table: str, row: tuple[Any, ...]) -> None: ...


class CaptureControl:
    """Owns the capture window of one process and applies it to the agent's collectors."""

    def __init__(self, agent: Agent, spec: CaptureSpec) -> None:
        self.agent = agent
        self.spec = spec
        self.window = CaptureWindow(spec, agent.now_ns, self._switch, self._emit)
        self.flush_soon = threading.Event()  # set when collection stops: deliver what it left
        self.switches = 0  # times collection was switched on or off, and the time that took on the switching thread
        self.switch_ns = 0

    @property
    def on(self) -> bool:
        """Whether collection is on now."""
        return self.window.on

    def start(self) -> None:
        """Install the triggers the spec needs and set the initial state (after the collectors start)."""
        agent = self.agent
        agent.ranges.on_step = self._step_mark
        if self.spec.range == "nvtx":
            agent.ranges.watch = self.window
            imports.when_imported({"torch": [self._watch_torch_nvtx]}, lambda name, exc: agent.diag(
                "warning", f"--capture-range=nvtx cannot watch torch.cuda.nvtx: {type(exc).__name__}: {exc}"))
        if self.spec.range == "cudaProfilerApi":
            hub = agent.collector("cuda-callbacks")
            if hub is None:
                agent.diag("warning", "--capture-range=cudaProfilerApi needs CUPTI's callback API, which is not "
                           "available in this process: nothing is recorded")
            else:
                hub.on_api(PROFILER_APIS, enter=self.window.profiler_api)
                self.window.profiler_watched = True
        self.window.begin()
        if not self.window.on:
            self._switch(False)
        graphs = agent.collector("graph-launches")
        if (self.window.probe_enabled and graphs is not None and graphs.launched() is not None
                and os.environ.get(PACE_ENV) in ("1", "poll")):
            # nothing may mark this program's steps (JAX): its CUDA graph launches pace the probe (opt-in:
            # on a short JAX loop the runs with it were slower, bench/results/real_clients.md)
            self.window.pace = PaceProbe(self.window, graphs.launched)
            self.window.pace.start()

    def finish(self) -> None:
        """Close the window at process end and report what happened (a ``collector`` row)."""
        info = self.window.finish()
        info.update(switches=self.switches, switch_ns=self.switch_ns)
        if self.spec.limited or self.window.windows:
            self.agent._add_row("collector", ("capture", self.window.windows, 0, 0, 0,
                                              json.dumps(info, sort_keys=True)))

    def _step_mark(self, source: str, t: int) -> None:
        """A step mark: to the capture window, then, where step_sum counts it, to the operator samples."""
        window = self.window
        before = (window.step_source, window.steps)
        window.step_mark(source, t)
        hooks = self.agent.collector("torch")
        if hooks is not None and (window.step_source, window.steps) != before:  # a step the window counted
            hooks.step_ended(window.steps)  # whether the next step records module ranges
        ops = self.agent.collector("torch-ops")
        # the outermost module calls (a program that marks no steps) count for the overhead probe only:
        # the operator samples keep their own windows for such programs (until the operators repeat)
        if ops is not None and source == window.step_source and source != "module":
            ops.step_mark(t)

    def api(self, start: bool) -> bool:
        """gpuscope.start() / gpuscope.stop(); return whether collection is on after the call."""
        if self.agent.ranges.anchor is not None:
            self.agent.ranges.anchor()  # the window's end lies right after it (launch_anchors.py)
        return self.window.api(start)

    # -- the switch ---------------------------------------------------------------------------
    def _switch(self, on: bool) -> None:
        began = time.perf_counter_ns()
        for collector in list(self.agent.collectors):
            collector.set_collecting(on)
        self.switch_ns += time.perf_counter_ns() - began
        self.switches += 1
        if not on and not self.window.probing:  # a probe's steps are timed: no flush in them
            self.flush_soon.set()

    def apply_to(self, collector: Collector) -> None:
        """Give a collector installed later (PyTorch hooks, operators) the current state."""
        collector.set_collecting(self.window.on)

    def _emit(self, start_ns: int, end_ns: int | None, reason: str) -> None:
        self.agent._add_row("capture_window", (start_ns, end_ns, reason))

    # -- torch.cuda.nvtx ----------------------------------------------------------------------
    def _watch_torch_nvtx(self, torch: Any) -> None:
        """Wrap torch.cuda.nvtx's range functions so that a range of the watched name starts and
        stops collection (before its push reaches NVTX, after its pop has)."""
        nvtx = torch.cuda.nvtx
        window = self.window
        local = threading.local()
        started: dict[int, str] = {}
        push, pop, start, end = nvtx.range_push, nvtx.range_pop, nvtx.range_start, nvtx.range_end

        def range_push(msg: str) -> Any:
            names = getattr(local, "names", None)
            if names is None:
                names = local.names = []
            names.append(msg)
            window.range_opened(msg, "", "nvtx")
            try:
                return push(msg)
            except BaseException:
                names.pop()
                window.range_closed(msg, "")
                raise

        def range_pop() -> Any:
            result = pop()
            names = getattr(local, "names", None)
            if names:
                window.range_closed(names.pop(), "")
            return result

        def range_start(msg: str) -> Any:
            window.range_opened(msg, "", "nvtx")
            try:
                handle = start(msg)
            except BaseException:
                window.range_closed(msg, "")
                raise
            started[int(handle)] = msg
            return handle

        def range_end(handle: Any) -> Any:
            result = end(handle)
            msg = started.pop(int(handle), None)
            if msg is not None:
                window.range_closed(msg, "")
            return result

        wrappers: list[tuple[Any, Any]] = [(range_push, push), (range_pop, pop), (range_start, start),
                                           (range_end, end)]
        for wrapper, original in wrappers:
            wrapper.__wrapped__ = original
            wrapper.__doc__ = original.__doc__
            setattr(nvtx, original.__name__, wrapper)
