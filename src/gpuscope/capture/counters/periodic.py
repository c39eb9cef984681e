"""A launcher-side thread that samples counters at a fixed interval (host, NVML)."""

from __future__ import annotations

import threading
from typing import Callable

Row = tuple[int, int, str, float]  # ts_ns (CLOCK_MONOTONIC), pid (0: the machine), counter, value


class PeriodicSampler:
    """Calls ``sample()`` every ``interval`` on its own thread and keeps the rows for ``take()``.

    Subclasses set up in ``start`` (returning False, after saying why, when they cannot run) and
    read their counters in ``sample``; a sampler whose ``sample`` raises stops with one line.
    """

    name = "sampler"

    def __init__(self, interval_s: float, diag: Callable[[str], None]) -> None:
        self.interval = interval_s
        self.diag = diag
        self.rows: list[Row] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        self._thread = threading.Thread(target=self._run, name=f"gpuscope-{self.name}", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def take(self) -> list[Row]:
        """Return the rows sampled since the last call."""
        with self._lock:
            rows, self.rows = self.rows, []
        return rows

    def sample(self) -> list[Row]:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                rows = self.sample()
            except Exception as exc:  # noqa: BLE001
                self.diag(f"{self.name} counters stopped: {type(exc).__name__}: {exc}")
                return
            with self._lock:
                self.rows += rows


