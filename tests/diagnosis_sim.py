"""A tiny simulator of one host thread driving one GPU stream, writing what CUPTI and gpuscope would
record into a synthetic report: kernels with their queued times, copies, synchronizations with
their Python stacks, ranges, step marks, Python samples and GPU memory counters.

The host has a clock (``host``) that advances as it works and launches; the GPU runs operations in
launch order, each starting when both it is free and the launch has reached it (``LATENCY`` after
the launch call). Times are integer ns.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
from report_builder import ReportBuilder, add_stack, add_sync_site

from gpuscope.trace.report import Report

LATENCY = 4_000  # launch call to the GPU starting the work, when idle
WAKE = 3_000  # GPU done to the host returning from a wait
LAUNCH = 5_000  # host time of one launch call
MAIN_TID = 100  # the builder's pid: the main thread's tid equals the pid


class Sim:
    """Writes a simulated run into a report file; ``open()`` finishes it."""

    def __init__(self, path: Path, t0: int = 1_000_000_000, sm_count: int = 132) -> None:
        self.b = ReportBuilder(path)
        self.con = self.b.writer.con
        self.host = t0
        self.gpu = t0
        self.corr = 1_000
        self._configs: dict[tuple[str, int], int] = {}
        self.con.execute(
            "INSERT INTO device (pid, id, name, compute_capability, sm_count, global_memory_bytes) "
            "VALUES (?, 0, 'NVIDIA H100', '9.0', ?, ?)", [self.b.pid, sm_count, 80 * 10**9])
        self._stacks: dict[tuple[str, int, str], int] = {}
        self._rows: dict[tuple[str, tuple[str, ...]], list[tuple[Any, ...]]] = defaultdict(list)

    def _add(self, table: str, columns: tuple[str, ...], row: tuple[Any, ...]) -> None:
        """Keep a row for the bulk insert of open() (one insert per row would take seconds)."""
        self._rows[(table, columns)].append(row)

    # -- GPU work --------------------------------------------------------------------------------
    def _config(self, name: str, blocks: int) -> int:
        key = (name, blocks)
        if key not in self._configs:
            cid = 1_000 + len(self._configs)
            sid = self.b.writer.intern(name)
            self.con.execute("INSERT INTO kernel_config (id, name_id, mangled_id, grid_x, grid_y, grid_z, "
                             "block_x, block_y, block_z) VALUES (?, ?, ?, ?, 1, 1, 128, 1, 1)",
                             [cid, sid, sid, blocks])
            self._configs[key] = cid
        return self._configs[key]

    def _place(self, duration: int, launch_cost: int) -> tuple[int, int, int]:
        launch = self.host
        self.host += launch_cost
        start = max(self.gpu, launch + LATENCY)
        self.gpu = start + duration
        self.corr += 1
        return launch, start, self.gpu

    def kernel(self, name: str, duration: int, *, launch_cost: int = LAUNCH, blocks: int = 1024,
               stream: int = 7) -> None:
        """Launch a kernel (the host spends ``launch_cost``)."""
        launch, start, end = self._place(duration, launch_cost)
        self._add("kernel", ("start_ns", "end_ns", "queued_ns", "submitted_ns", "pid", "device_id", "context_id",
                             "stream_id", "correlation_id", "config_id"),
                  (start, end, launch, launch, self.b.pid, 0, 1, stream, self.corr, self._config(name, blocks)))

    def copy(self, kind: str, nbytes: int, duration: int, *, pageable: bool = False, is_async: bool = True,
             stream: int = 7, launch_cost: int = LAUNCH) -> int:
        """Issue a memcpy; a pageable or synchronous one keeps the host until it is done. Returns its
        correlation id."""
        launch, start, end = self._place(duration, launch_cost)
        host_kind = "Pageable" if pageable else "Pinned"
        src, dst = (host_kind, "Device") if kind == "HtoD" else ("Device", host_kind)
        self._add("memcpy", ("start_ns", "end_ns", "pid", "device_id", "context_id", "stream_id", "correlation_id",
                             "copy_kind", "src_kind", "dst_kind", "bytes", "is_async"),
                  (start, end, self.b.pid, 0, 1, stream, self.corr, kind, src, dst, nbytes, is_async))
        if pageable or not is_async:
            self.host = max(self.host, end + WAKE)
        return self.corr

    # -- host -------------------------------------------------------------------------------------
    def stack(self, file: str, line: int, func: str) -> int:
        """The stack node of ``train.py``'s loop calling ``func`` at ``file:line``."""
        key = (file, line, func)
        if key not in self._stacks:
            self._stacks[key] = add_stack(self.b, [("/home/user/project/train.py", 90, "<module>"), (file, line, func)])
        return self._stacks[key]

    def cpu(self, ns: int, at: tuple[str, int, str] | None = None, every: int = 100_000) -> None:
        """Run Python for ``ns``; with ``at``, sampled there every ``every`` ns."""
        if at is not None:
            node = self.stack(*at)
            for t in range(self.host + every, self.host + ns + 1, every):
                self._add("cpu_sample", ("ts_ns", "pid", "tid", "stack_id", "weight_ns"),
                          (t, self.b.pid, MAIN_TID, node, every))
        self.host += ns

    def sync(self, at: tuple[str, int, str], api: str = "cudaStreamSynchronize", cupti: bool = True,
             site: bool = True) -> None:
        """Wait for the GPU: a ``sync_site`` row with its stack (unless not ``site``, as in reports
        from before sync sites were recorded) and CUPTI's ``sync`` row (unless not ``cupti``)."""
        start = self.host
        end = max(start + 2_000, self.gpu + WAKE)
        self.corr += 1
        if site:
            add_sync_site(self.b, start, end, self.stack(*at), api=api, tid=MAIN_TID, correlation_id=self.corr)
        if cupti:
            kind = "ContextSynchronize" if "Device" in api else "StreamSynchronize"
            self._add("sync", ("start_ns", "end_ns", "pid", "context_id", "stream_id", "event_id", "type",
                               "correlation_id", "return_value"), (start, end, self.b.pid, 1, 7, 0, kind, self.corr, 0))
        self.host = end

    def item(self, at: tuple[str, int, str]) -> None:
        """``.item()``: a 4-byte device-to-host copy, then a stream synchronization."""
        self.copy("DtoH", 4, 2_000)
        self.sync(at)

    def range(self, name: str, start: int, end: int, category: str | None = None, source: str = "torch") -> None:
        self.b.range(name, start, end, MAIN_TID, source=source, category=category)

    def loader(self, ns: int, at: tuple[str, int, str] | None = None) -> None:
        """Wait ``ns`` in ``DataLoader.__next__`` (loading in the main thread)."""
        start = self.host
        self.cpu(ns, at)
        self.range("DataLoader.__next__", start, self.host, category="dataloader")

    def step(self) -> None:
        """Mark the end of a step, as gpuscope.step() does."""
        self.b.mark("step", self.host, MAIN_TID, source="gpuscope")

    def memory(self, used: int, every: int = 100_000_000) -> None:
        """NVML's used memory of GPU 0, sampled from the start to now."""
        first = min(r[0] for r in self._rows[next(k for k in self._rows if k[0] == "kernel")])
        for t in range(first, self.host, every):
            self._add("host_counter", ("ts_ns", "pid", "name", "value"), (t, 0, "gpu0.memory_used_bytes", float(used)))

    def power(self, watts: float, limit: float, capped: bool, idle_watts: float = 90.0, clock: float = 1980.0,
              every: int = 10_000_000) -> None:
        """NVML's power, its limit, the power-cap reason and the SM clock of GPU 0, sampled from the first
        kernel to now (one idle sample before it, at ``idle_watts``)."""
        first = min(r[0] for r in self._rows[next(k for k in self._rows if k[0] == "kernel")])
        rows = [(first - every, idle_watts, 0.0)] + [(t, watts, 99.0) for t in range(first, self.host, every)]
        for t, w, util in rows:
            for name, value in (("power_watts", w), ("util_percent", util), ("power_limit_watts", limit),
                                ("power_capped", float(capped and util > 0)), ("sm_clock_mhz", clock)):
                self._add("host_counter", ("ts_ns", "pid", "name", "value"), (t, 0, f"gpu0.{name}", value))

    def cores(self, n: int) -> None:
        """Host counters of ``n`` cores (so that the host summary knows the core count)."""
        for i in range(n):
            self._add("host_counter", ("ts_ns", "pid", "name", "value"), (self.host, 0, f"cpu{i}.util_percent", 50.0))

    def open(self, **meta: Any) -> Report:
        for (table, columns), rows in self._rows.items():
            frame = pd.DataFrame(rows, columns=list(columns))  # noqa: F841  (read by the query below)
            self.con.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT * FROM frame")
        return self.b.open(**meta)
