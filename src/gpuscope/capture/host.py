"""Host and process counters over time, sampled from the launcher (the program pays nothing).

Every ``interval`` the launcher reads, with psutil, the utilization of each CPU core and, for the
profiled program and every process below it, its CPU utilization (percent of one core), resident
memory and thread count. Times are CLOCK_MONOTONIC; the writer moves them to the session clock.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

Row = tuple[int, int, str, float]  # ts_ns, pid (0 for the host), counter name, value


class HostSampler:
    """A thread that samples host and process-tree counters until stopped."""

    def __init__(self, root_pid: int, interval_s: float, diag: Callable[[str], None]) -> None:
        self.root_pid = root_pid
        self.interval = interval_s
        self.diag = diag
        self.rows: list[Row] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._procs: dict[int, Any] = {}
        self._thread: threading.Thread | None = None

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
        self._thread = threading.Thread(target=self._run, name="gpuscope-host", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def take(self) -> list[Row]:
        with self._lock:
            rows, self.rows = self.rows, []
        return rows

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                rows = self._sample()
            except Exception as exc:  # noqa: BLE001
                self.diag(f"host counters stopped: {type(exc).__name__}: {exc}")
                return
            with self._lock:
                self.rows += rows

    def _sample(self) -> list[Row]:
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
