"""CUDA graph launches seen from the host: when and on which thread each graph was launched.

A kernel that runs as a node of a CUDA graph carries the correlation id of the graph's launch,
but CUPTI's queued time of such a kernel is not the host's launch time. Without API tracing
(``--trace cuda-api``) the launch call would be unknown and the kernel could not be placed in the
range around ``graph.replay()``. Graph launches are few (that is what graphs are for), so each
is recorded here through the callback API, as a ``launch_call`` row.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .cupti_callbacks import CallbackHub

GRAPH_LAUNCH_APIS = ["cudaGraphLaunch", "cuGraphLaunch"]


class GraphLaunches:
    """Records the host side of every CUDA graph launch."""

    def __init__(self, hub: CallbackHub, offset_ns: int) -> None:
        self.offset = offset_ns
        self._local = threading.local()
        self._rows: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        hub.on_api(GRAPH_LAUNCH_APIS, enter=self._enter, exit=self._exit)

    def take(self) -> list[tuple[Any, ...]]:
        """Return the rows recorded since the last call."""
        with self._lock:
            rows, self._rows = self._rows, []
        return rows

    def _enter(self, name: str, correlation_id: int) -> None:
        self._local.start = time.monotonic_ns()

    def _exit(self, name: str, correlation_id: int) -> None:
        start = getattr(self._local, "start", None)
        if start is None:
            return
        self._local.start = None
        row = (start + self.offset, time.monotonic_ns() + self.offset, threading.get_native_id(), name,
               correlation_id)
        with self._lock:
            self._rows.append(row)
