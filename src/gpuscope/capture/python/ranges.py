"""Ranges recorded by gpuscope's own Python code inside the profiled process.

gpuscope's annotation API, the ``nvtx`` package (when gpuscope profiles the process) and the
PyTorch hooks all record here. A push/pop range lives on its thread's stack; a start/end range
can end on another thread. Completed ranges become rows of the report's ``nvtx_range`` table;
ranges still open when the process ends are delivered with no end. Misuse (a pop with nothing
pushed, an end of an unknown id) is counted, never raised.

While collection is off (``on`` False, outside a capture window) a push still goes on its stack,
without a clock read, so that pops stay paired; ranges that start then are not recorded. Step marks
are recorded always (they are few, and keep steps numbered in any window). Two optional hooks serve
the capture range: ``on_step(source, t)`` at every step mark, and ``watch`` (an object with
``range_opened(name, domain, source)`` and ``range_closed(name, domain)``) at every range.

``anchor``, when set, is called right before a range's start and end are read, and before a step
mark's time (launch_anchors.py): GPU work launched before a boundary then lies before it, and work
launched after it after it. With collection off it is called only where a capture window may open:
step marks, and range starts when a window watches for a named range.

*Logged ranges* are the cheap kind, for calls made by the thousand (PyTorch module calls): the
caller extends its thread's log (:meth:`RangeRecorder.thread_log`) with ``(start_ns, ~kind)`` when
the range starts and appends ``end_ns`` when it ends, where ``kind`` is a small int from
:meth:`RangeRecorder.kind` standing for name, domain, source and category (its complement, a
negative number, tells a start's two entries from an end). Nothing else happens on the caller's
thread, and the flush thread only hands the entries over as 64-bit integers (``range_log`` rows,
with the kinds named since its last flush as ``range_kind`` rows): the launcher pairs starts with
ends (trace/range_log.py), out of the program's interpreter, where pairing them took as long as
the calls themselves.

Runs inside the profiled process: standard library only, and cheap (two clock reads and a few
list operations per range, and two anchor calls where anchors are on; two clock reads and two
list appends per logged range; per flush, one copy of each thread's log).
"""

from __future__ import annotations

import itertools
import json
import threading
from array import array
from collections import deque
import time
from typing import TYPE_CHECKING, Any

from ... import annotation
from . import hook_cost

if TYPE_CHECKING:
    from ..collectors import Context

# start_ns, end_ns, tid, id, domain, name, kind, source, category, color: the nvtx_range columns
# (strings not yet interned, pid left out)
Row = tuple[Any, ...]


STEP_CATEGORIES = ("step", "iteration")  # marks the capture window counts (process/window.py)


class RangeRecorder:
    """Per-thread range stacks and the finished rows, handed to the spool by the agent."""

    def __init__(self, clock_offset_ns: int = 0) -> None:
        self.offset = clock_offset_ns
        self.rows: deque[Row] = deque()  # appended by any thread, drained by the flush thread
        self.counts = {"ranges": 0, "unbalanced_pops": 0, "unknown_ends": 0, "open_at_exit": 0,
                       "ended_on_other_thread": 0, "reentrant_calls": 0, "logged_entries": 0, "bad_log_entries": 0}
        self._local = threading.local()
        self._ids = itertools.count(1)
        self._started: dict[int, tuple[int | None, int, str, str, str, str, str | None]] = {}
        self._stacks: list[tuple[int, list[Any]]] = []  # (tid, stack) of every thread, for exit
        self._lock = threading.Lock()
        # logged ranges: per thread (tid, log); the kinds, and how many of them were sent
        self._logs: list[tuple[int, list[int]]] = []
        self._kinds: list[tuple[str, str, str, str]] = []  # kind -> (name, domain, source, category)
        self._kind_ids: dict[tuple[str, str, str, str], int] = {}
        self._kinds_sent = 0
        self._take_lock = threading.Lock()
        self.on = True
        self.on_step: Any = None  # callable(source, t_ns) at each step mark
        self.step_marked = False  # a step mark (gpuscope.step(), optimizer.step()) has been recorded
        self.watch: Any = None  # capture window that starts on a named range
        self.anchor: Any = None  # callable() marking a range boundary among CUDA calls

    def now(self) -> int:
        return time.monotonic_ns() + self.offset

    def _stack(self) -> list[Any]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
            tid = self._local.tid = threading.get_native_id()
            with self._lock:
                self._stacks.append((tid, stack))
        return stack

    # -- push/pop ----------------------------------------------------------------------------
    def push(self, name: str, domain: str = "", source: str = "gpuscope", category: str = "",
             color: str | None = None) -> int:
        """Open a range on this thread; return its nesting depth (0 for outermost)."""
        stack = self._stack()
        if self.anchor is not None and (self.on or self.watch is not None):
            self.anchor()  # before the watch: a capture window may open here
        if self.watch is not None:
            self.watch.range_opened(name, domain, source)
        stack.append((time.monotonic_ns() if self.on else None, name, domain, source, category, color))
        return len(stack) - 1

    def pop(self) -> bool:
        """Close this thread's innermost range; return False (and count it) if none was open."""
        if self.anchor is not None and self.on:
            self.anchor()
        end = time.monotonic_ns()
        stack = self._stack()
        if not stack:
            self.counts["unbalanced_pops"] += 1
            return False
        start, name, domain, source, category, color = stack.pop()
        if start is not None:
            self.rows.append((start + self.offset, end + self.offset, self._local.tid, next(self._ids),
                              domain, name, "range", source, category, color))
            self.counts["ranges"] += 1
        if self.watch is not None:
            self.watch.range_closed(name, domain)
        return True

    # -- start/end (may cross threads) ---------------------------------------------------
    def start(self, name: str, domain: str = "", source: str = "gpuscope", category: str = "",
              color: str | None = None, at_ns: int | None = None) -> int:
        """Open a range that any thread may end (at ``at_ns``, CLOCK_MONOTONIC, if given); return its id."""
        self._stack()
        if self.anchor is not None and (self.on or self.watch is not None):
            self.anchor()
        if self.watch is not None:
            self.watch.range_opened(name, domain, source)
        rid = next(self._ids)
        start = None if not self.on else time.monotonic_ns() if at_ns is None else at_ns
        self._started[rid] = (start, self._local.tid, name, domain, source, category, color)
        return rid

    def end(self, rid: int) -> bool:
        """End the range ``rid``; return False (and count it) if no such range is open."""
        if self.anchor is not None and self.on:
            self.anchor()
        end = time.monotonic_ns()
        started = self._started.pop(rid, None)
        if started is None:
            self.counts["unknown_ends"] += 1
            return False
        start, tid, name, domain, source, category, color = started
        if start is not None:
            if tid != threading.get_native_id():
                self.counts["ended_on_other_thread"] += 1
            self.rows.append((start + self.offset, end + self.offset, tid, rid, domain, name, "range",
                              source, category, color))
            self.counts["ranges"] += 1
        if self.watch is not None:
            self.watch.range_closed(name, domain)
        return True

    def mark(self, name: str, domain: str = "", source: str = "gpuscope", category: str = "",
             color: str | None = None) -> None:
        """Record an instant (a step mark: ``category`` ``step``; the end of an outermost module call
        where nothing marks steps: ``iteration``)."""
        self._stack()
        if self.anchor is not None and (self.on or category in STEP_CATEGORIES):
            self.anchor()  # a capture window may open or close at a step mark
        t = self.now()
        if category in STEP_CATEGORIES:
            if category == "step":
                self.step_marked = True
            if self.on_step is not None:
                self.on_step(source, t)
        elif not self.on:
            return
        self.rows.append((t, t, self._local.tid, next(self._ids), domain, name, "mark", source,
                          category, color))

    # -- logged ranges -------------------------------------------------------------------------
    def kind(self, name: str, domain: str = "", source: str = "gpuscope", category: str = "") -> int:
        """Return the small int that stands for a logged range's name, domain, source and category."""
        key = (name, domain, source, category)
        found = self._kind_ids.get(key)
        if found is None:
            with self._lock:
                found = self._kind_ids.get(key)
                if found is None:
                    found = self._kind_ids[key] = len(self._kinds)
                    self._kinds.append(key)
        return found

    def thread_log(self) -> list[int]:
        """Return this thread's log of ranges (made and registered on its first call): extend it with
        ``(start_ns, ~kind)`` where a range starts and append ``end_ns`` where it ends, CLOCK_MONOTONIC."""
        log = getattr(self._local, "log", None)
        if log is None:
            self._stack()
            log = self._local.log = []
            with self._lock:
                self._logs.append((self._local.tid, log))
        return log

    def _take_logs(self) -> dict[str, list[Row]]:
        """Return the kinds named since the last call (``range_kind``: kind, name, domain, source,
        category) and each thread's log entries (``range_log``: tid, clock offset, int64 bytes)."""
        out: dict[str, list[Row]] = {}
        with self._take_lock:
            with self._lock:
                logs = list(self._logs)
            blobs = []
            for tid, log in logs:
                n = len(log)
                if not n:
                    continue
                events = log[:n]
                del log[:n]  # the thread may append meanwhile: only what was copied goes
                try:
                    blobs.append((tid, self.offset, array("q", events).tobytes()))
                except (TypeError, OverflowError):  # not an int: a caller broke the log's format
                    self.counts["bad_log_entries"] += n
                    continue
                self.counts["logged_entries"] += n
            with self._lock:  # after the entries: a kind is named before any entry of it is logged
                kinds = self._kinds[self._kinds_sent:]
                self._kinds_sent += len(kinds)
            if kinds:
                first = self._kinds_sent - len(kinds)
                out["range_kind"] = [(first + i, *key) for i, key in enumerate(kinds)]
            if blobs:
                out["range_log"] = blobs
        return out

    # -- delivery ----------------------------------------------------------------------------
    # -- the collector protocol (capture/collectors.py) ---------------------------------------
    def set_collecting(self, on: bool) -> None:
        """Record ranges (``on``), or keep only the bookkeeping that pairs pushes with pops."""
        self.on = on

    def take_rows(self) -> dict[str, list[Row]]:
        """Return the finished ranges since the last call, as ``range`` rows, and the logged ranges'
        entries and kinds (``range_log``, ``range_kind``) for the launcher to pair."""
        out = self._take_logs() if self._logs else {}
        rows = self.take()
        if rows:
            out["range"] = rows
        return out

    def shutdown(self, ctx: Context) -> None:
        """Deliver the ranges still open, and the ``ranges`` collector row: the counts of this recorder
        and of the PyTorch hooks, with the per-call costs measured now (hook_cost.py) for the overhead
        estimate; what went wrong is said as an ``info`` diagnostic."""
        for row in self.close_open():
            ctx.add_row("range", row)
        hooks = ctx.collector("torch")
        counts = dict(self.counts)
        if hooks is not None:
            for key, n in hooks.counts.items():
                counts[key] = counts.get(key, 0) + n
        if counts["ranges"] or counts["logged_entries"]:
            counts.update(hook_cost.costs(RangeRecorder, hooks, ctx.diag))
            counts.update(getattr(ctx.collector("launch-anchors"), "cost", {}))
        ctx.add_row("collector", ("ranges", counts["ranges"], 0, 0, counts.get("hook_errors", 0),
                                  json.dumps(counts, sort_keys=True)))
        closed = hooks.closed_at_pass_end() if hooks is not None else None  # the modules, by name
        for key, text in SAID.items():
            if counts.get(key):
                line = closed if key == "backward_closed_at_pass_end" and closed else f"{counts[key]} {text}"
                ctx.add_row("diagnostic", (ctx.now_ns(), "info", line))

    def take(self) -> list[Row]:
        """Return the finished pushed and started ranges and marks recorded since the last call (the
        logged ranges go by :meth:`take_rows`, unpaired)."""
        rows = self.rows
        return [rows.popleft() for _ in range(len(rows))]

    def close_open(self) -> list[Row]:
        """Deliver every pushed or started range still open (end NULL) and forget them; for the
        process's exit. Logged ranges still open are the launcher's to close (trace/range_log.py)."""
        rows = []
        with self._lock:
            stacks = list(self._stacks)
        for tid, stack in stacks:
            while stack:
                start, name, domain, source, category, color = stack.pop()
                if start is None:
                    continue
                rows.append((start + self.offset, None, tid, next(self._ids), domain, name, "range",
                             source, category, color))
        for rid, (start, tid, name, domain, source, category, color) in list(self._started.items()):
            if start is None:
                continue
            rows.append((start + self.offset, None, tid, rid, domain, name, "range", source, category, color))
        self._started.clear()
        self.counts["open_at_exit"] += len(rows)
        return rows



# What the ``ranges`` row's counts mean, said at the end where they are not zero.
SAID = {
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


def start(ctx: Context, module: Any = None) -> RangeRecorder:
    """Return the process's range recorder, which gpuscope's annotations (gpuscope.range, step, mark)
    now record into; its boundaries make launch anchors where those started."""
    recorder = RangeRecorder(ctx.clock_offset_ns)
    recorder.anchor = getattr(ctx.collector("launch-anchors"), "call", None)
    annotation.use_recorder(recorder)
    return recorder
