"""CUDA graph launches seen from the host: when and on which thread each graph was launched.

A kernel that runs as a node of a CUDA graph carries the correlation id of the graph's launch,
but CUPTI's queued time of such a kernel is not the host's launch time. Without API tracing
(``--trace cuda-api``) the launch call would be unknown and the kernel could not be placed in the
range around ``graph.replay()``. Graph launches are few (that is what graphs are for), so each
is recorded here through the callback API, as a ``launch_call`` row.

Where gpuscope's C subscriber is loaded (native.py), the launches are timed in C and no Python runs
at a launch: XLA launches a graph per jitted call, and two Python callbacks per launch (each
taking the GIL on the thread that launches) cost a JAX training loop about 8% of its time in one
profiled process (bench/results/real_clients.md). As with the Python handlers, a runtime
``cudaGraphLaunch`` is the row, not the driver call that carries it out (its correlation id is the
one its kernels carry).
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING, Any

from .callbacks import CallbackHub, TimedCalls
from .sync_sites import SYNC_SITES_ENV

if TYPE_CHECKING:
    from ..collectors import Context

GRAPH_LAUNCH_APIS = ["cudaGraphLaunch", "cuGraphLaunch"]


TAKE_CHUNK = 4096  # calls copied from C at a time


class GraphLaunches(TimedCalls):
    """Records the host side of every CUDA graph launch as ``launch_call`` rows."""

    def __init__(self, hub: CallbackHub, offset_ns: int) -> None:
        timed = hub.native_timed(GRAPH_LAUNCH_APIS)
        self._shim = hub.native if timed else None
        self._names = timed
        super().__init__(hub, [] if timed else GRAPH_LAUNCH_APIS, offset_ns)

    def set_collecting(self, on: bool) -> None:
        """Time graph launches (``on``), or let them pass."""
        super().set_collecting(on)
        if self._shim is not None:
            self._shim.gs_set_timed_on(1 if on else 0)

    def launched(self) -> int | None:
        """How many graph launches have ended since the start, collection on or off (the overhead
        probe's measure of a program's pace where nothing marks its steps); None where they are not
        counted in C."""
        return int(self._shim.gs_timed_count()) if self._shim is not None else None

    def take(self) -> list[tuple[Any, ...]]:
        """Return the launches recorded since the last call: those timed in C, then any in Python."""
        rows = []
        if self._shim is not None and self._shim.gs_timed_pending():
            buf = (ctypes.c_int64 * (5 * TAKE_CHUNK))()
            while True:
                n = int(self._shim.gs_timed_take(buf, TAKE_CHUNK))
                flat = buf[: 5 * n]
                rows += [(flat[i] + self.offset, flat[i + 1] + self.offset, flat[i + 2],
                          self._names.get(flat[i + 3], "cudaGraphLaunch"), flat[i + 4]) for i in range(0, 5 * n, 5)]
                if n < TAKE_CHUNK:
                    break
        return rows + super().take()

    def shutdown(self, ctx: Context) -> None:
        """Say launches C could not keep (out of memory), if any."""
        lost = int(self._shim.gs_timed_lost()) if self._shim is not None else 0
        if lost:
            ctx.diag("warning", f"{lost} CUDA graph launches were not recorded (no memory to keep them)")


def start(ctx: Context, module: Any = None) -> GraphLaunches | None:
    """Record graph launches where CUPTI's callback API is subscribed (and synchronization sites are
    not turned off); return the recorder, or None."""
    hub = ctx.collector("cuda-callbacks")
    if hub is None or os.environ.get(SYNC_SITES_ENV) == "0":
        return None
    return GraphLaunches(hub, ctx.clock_offset_ns)
