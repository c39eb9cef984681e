"""Host and process counters over time, sampled from the launcher (the program pays nothing).

Every ``interval`` the launcher reads, with psutil, the utilization of each CPU core and, for the
profiled program and every process below it, its CPU utilization (percent of one core), resident
memory and thread count. Times are CLOCK_MONOTONIC; the writer moves them to the session clock.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .periodic import PeriodicSampler, Row


class HostSampler(PeriodicSampler):
    """Samples host and process-tree counters until stopped."""

    name = "host"

    def __init__(self, root_pid: int, interval_s: float, diag: Callable[[str], None]) -> None:
        super().__init__(interval_s, diag)
        self.root_pid = root_pid
        self._procs: dict[int, Any] = {}

    def start(self) -> bool:
        """Start sampling; return False (after saying why, once) if psutil cannot be used."""
        try:
            import psutil  # noqa: PLC0415

            self._psutil = psutil
            psutil.cpu_percent(percpu=True)  # the first call only sets the baseline
            self._root = psutil.Process(self.root_pid)
        except Exception as exc:  # noqa: BLE001
            self.diag(f"host counters are off: {type(exc).__name__}: {exc}")
            return False
        return super().start()

    def sample(self) -> list[Row]:
        ps = self._psutil
        now = time.monotonic_ns()
        rows: list[Row] = [(now, 0, f"cpu{i}.util_percent", v) for i, v in enumerate(ps.cpu_percent(percpu=True))]
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except ps.NoSuchProcess:
            return rows
        for proc in procs:
            known = self._procs.setdefault(proc.pid, proc)
            try:
                with known.oneshot():
                    cpu = known.cpu_percent()  # since the previous call; 0.0 the first time
                    rss = known.memory_info().rss
                    threads = known.num_threads()
            except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
                continue
            rows += [(now, proc.pid, "process.cpu_percent", cpu), (now, proc.pid, "process.rss_bytes", rss),
                     (now, proc.pid, "process.threads", threads)]
        return rows
