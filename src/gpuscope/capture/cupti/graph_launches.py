"""CUDA graph launches seen from the host: when and on which thread each graph was launched.

A kernel that runs as a node of a CUDA graph carries the correlation id of the graph's launch,
but CUPTI's queued time of such a kernel is not the host's launch time. Without API tracing
(``--trace cuda-api``) the launch call would be unknown and the kernel could not be placed in the
range around ``graph.replay()``. Graph launches are few (that is what graphs are for), so each
is recorded here through the callback API, as a ``launch_call`` row.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .callbacks import CallbackHub, TimedCalls
from .sync_sites import SYNC_SITES_ENV

if TYPE_CHECKING:
    from ..collectors import Context

GRAPH_LAUNCH_APIS = ["cudaGraphLaunch", "cuGraphLaunch"]


class GraphLaunches(TimedCalls):
    """Records the host side of every CUDA graph launch as ``launch_call`` rows."""

    def __init__(self, hub: CallbackHub, offset_ns: int) -> None:
        super().__init__(hub, GRAPH_LAUNCH_APIS, offset_ns)


def start(ctx: Context, module: Any = None) -> GraphLaunches | None:
    """Record graph launches where CUPTI's callback API is subscribed (and synchronization sites are
    not turned off); return the recorder, or None."""
    hub = ctx.collector("cuda-callbacks")
    if hub is None or os.environ.get(SYNC_SITES_ENV) == "0":
        return None
    return GraphLaunches(hub, ctx.clock_offset_ns)
