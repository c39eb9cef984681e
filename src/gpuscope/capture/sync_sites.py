"""Where the host waits for the GPU: every synchronizing CUDA call with the Python stack that made it.

At the entry of a synchronizing call (stream, device, context and event synchronization, and the
copies that block the host) the calling thread's Python stack is interned; at its exit a row
``sync_site`` records the host time the call took. In PyTorch these calls come from ``.item()``,
``.cpu()``, ``.tolist()``, ``nonzero``, printing a CUDA tensor, ``torch.cuda.synchronize()``.
The stack is taken only at these calls, so a program pays nothing per kernel launch.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import FrameType
from typing import Any

from .cupti_callbacks import CallbackHub
from .stacks import StackTable

SYNC_APIS = [
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaThreadSynchronize", "cudaEventSynchronize",
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyPeer", "cudaMemcpyFromSymbol",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemcpyPeer",
]

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


class SyncSites:
    """Records synchronizing CUDA calls and their Python stacks as ``sync_site`` rows."""

    def __init__(self, hub: CallbackHub, stacks: StackTable, offset_ns: int) -> None:
        self.stacks = stacks
        self.offset = offset_ns
        self.count = 0
        self.collecting = True  # False outside a capture window
        self._local = threading.local()
        self._rows: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self.missing = hub.on_api(SYNC_APIS, enter=self._enter, exit=self._exit)

    def take(self) -> list[tuple[Any, ...]]:
        """Return the rows recorded since the last call."""
        with self._lock:
            rows, self._rows = self._rows, []
        return rows

    def _enter(self, name: str, correlation_id: int) -> None:
        if not self.collecting:
            return
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(_OWN_DIR):
            frame = frame.f_back
        self._local.open = (time.monotonic_ns(), self.stacks.stack_of(frame))

    def _exit(self, name: str, correlation_id: int) -> None:
        end = time.monotonic_ns()
        opened = getattr(self._local, "open", None)
        if opened is None:
            return
        self._local.open = None
        row = (opened[0] + self.offset, end + self.offset, threading.get_native_id(), name,
               correlation_id, opened[1])
        with self._lock:
            self._rows.append(row)
        self.count += 1
