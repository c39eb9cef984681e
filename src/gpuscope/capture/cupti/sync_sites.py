"""Where the host waits for the GPU: every synchronizing CUDA call with the Python stack that made it.

At the entry of a synchronizing call (stream, device, context and event synchronization, and the
copies that block the host) the calling thread's Python stack is interned; at its exit a row
``sync_site`` records the host time the call took. In PyTorch these calls come from ``.item()``,
``.cpu()``, ``.tolist()``, ``nonzero``, printing a CUDA tensor, ``torch.cuda.synchronize()``.
The stack is taken only at these calls, so a program pays nothing per kernel launch.

Only the driver API's synchronizing calls are watched: every runtime call that waits is carried
out by one of them on the same thread, under the same Python stack, and watching one layer halves
the Python callbacks per wait (a runtime call watched too cost its driver call's callbacks twice,
entry and exit each, before the nested one was dropped). The rows name the driver function
(``cuStreamSynchronize`` for ``torch.cuda.current_stream().synchronize()`` and ``.item()``).
``GPUSCOPE_SYNC_LAYER=both`` watches the runtime calls as well (named by the runtime then).
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any

from .callbacks import CallbackHub, TimedCalls
from ..python.stacks import StackTable

if TYPE_CHECKING:
    from ..collectors import Context

SYNC_SITES_ENV = "GPUSCOPE_SYNC_SITES"  # "0": no synchronization sites, nor graph launches (for measuring their cost)
SYNC_LAYER_ENV = "GPUSCOPE_SYNC_LAYER"  # "both": the runtime API's synchronizing calls too (for measuring)

SYNC_APIS = [
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaThreadSynchronize", "cudaEventSynchronize",
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyPeer", "cudaMemcpyFromSymbol",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemcpyPeer",
    "cuMemcpy2D", "cuMemcpy2DUnaligned", "cuMemcpy3D",
]

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


class SyncSites(TimedCalls):
    """Records synchronizing CUDA calls and their Python stacks as ``sync_site`` rows."""

    TABLE = "sync_site"

    def __init__(self, hub: CallbackHub, stacks: StackTable, offset_ns: int) -> None:
        self.stacks = stacks
        names = SYNC_APIS
        if os.environ.get(SYNC_LAYER_ENV) != "both":
            names = [n for n in SYNC_APIS if not n.startswith("cuda")]
        super().__init__(hub, names, offset_ns)

    def context(self) -> tuple[Any, ...]:
        """The calling thread's Python stack, gpuscope's own frames left out."""
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(_OWN_DIR):
            frame = frame.f_back
        return (self.stacks.stack_of(frame),)


def start(ctx: Context, module: Any = None) -> SyncSites | None:
    """Record synchronization sites where CUPTI's callback API is subscribed; return the recorder, or None."""
    hub = ctx.collector("cuda-callbacks")
    if hub is None or os.environ.get(SYNC_SITES_ENV) == "0":
        return None
    return SyncSites(hub, ctx.stacks, ctx.clock_offset_ns)
