"""Launch anchors: where each range boundary falls in the order of CUDA API calls.

Every CUDA API call gets a correlation id from one counter, and every kernel, copy and set record
carries the id of the call that launched it, even without API tracing. So a host call whose id
and time are known splits the operations into those launched before it and those launched after.
Right before each boundary gpuscope takes a time for (the start and end of a range it records:
PyTorch modules, optimizer steps, annotations; a step mark; ``gpuscope.start()``/``stop()``), it
makes one cheap CUDA driver call (``cuDriverGetVersion``: no context, no GPU work) and records its
correlation id and time as a ``launch_call`` row. An operation launched after the boundary has a
larger id than the anchor, and one launched before it a smaller id; its launch time is its GPU
start kept between the times of the anchors around its id (trace/launch.py), so it falls on the
right side of every boundary: work launched before an anchor is placed before it, and work
launched after it starts on the GPU after the boundary and before the next anchor after it.
Anchors are recorded whether collection is on or not (they are few), so that a capture window
that opens at a step mark has its anchor.

This replaces CUPTI's kernel latency timestamps (``queued``), which cost about 2.3 µs per kernel
launch and made the program's memory grow by 76 MiB per million kernels on an H100
(bench/RESULTS.md): an anchor costs one call per range boundary, not one per launch.

The anchor's correlation id comes from CUPTI's callback API on ``cuDriverGetVersion`` alone. Where
gpuscope's C callbacks are loaded (native.py), the whole anchor is C: ``gs_anchor`` reads the
clock, makes the call, and its C subscriber keeps the id, with no Python callback; the rows wait
in C until the flush thread takes them (:class:`NativeAnchors`). Otherwise a Python callback per
anchor takes the id (:class:`CallbackAnchors`, about 3 µs on an H100 host with the call itself,
bench/RESULTS.md).
CUPTI's DRIVER activity narrowed to that one call would need no Python, but the CUPTI that PyTorch
ships (13.0) cannot leave the other driver calls out of it (``cuptiActivityEnableDriverApi``
refused them), and API records for every launch are what ``--trace cuda-api`` costs.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
from array import array
from typing import TYPE_CHECKING, Any, Callable

from ..python import hook_cost
from .callbacks import CallbackHub

if TYPE_CHECKING:
    from ..collectors import Context

ANCHOR_API = "cuDriverGetVersion"
ANCHORS_ENV = "GPUSCOPE_ANCHORS"  # "0": no anchors (for measuring their cost)
NATIVE_ANCHORS_ENV = "GPUSCOPE_NATIVE_ANCHORS"  # "0": anchors through a Python callback (for measuring)


def anchor_call() -> Callable[[], None]:
    """Return a function that makes one ``cuDriverGetVersion`` call, keeping the GIL (it is short)."""
    fn = ctypes.PyDLL("libcuda.so.1").cuDriverGetVersion
    fn.argtypes = [ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_int
    out = ctypes.c_int()
    ref = ctypes.byref(out)

    def call() -> None:
        fn(ref)

    return call


class CallbackAnchors:
    """Anchors whose correlation ids come from CUPTI's callback API, as ``launch_call`` rows.

    The least Python work per anchor: at the call's entry only, one clock read and one append.
    """

    def __init__(self, hub: CallbackHub, offset_ns: int, call: Callable[[], None] | None = None) -> None:
        self.offset = offset_ns
        self.call = call  # makes one anchor (anchor_call); the range recorder calls it at each boundary
        self.cost: dict[str, int] = {}  # measured at the end, for the ``ranges`` collector row
        self._rows: list[tuple[int, int, int]] = []
        self.missing = hub.on_api_entry([ANCHOR_API], self._entered)

    def _entered(self, correlation_id: int) -> None:
        self._rows.append((time.monotonic_ns(), threading.get_native_id(), correlation_id))

    def pending(self) -> int:
        """How many anchors wait for :meth:`take`."""
        return len(self._rows)

    def forget_since(self, pending: int) -> None:
        """Drop the anchors recorded after :meth:`pending` returned ``pending``."""
        del self._rows[pending:]

    def set_collecting(self, on: bool) -> None:
        """Anchors are recorded whatever the capture window (as they always were)."""

    def shutdown(self, ctx: Context) -> None:
        """Measure what one anchor costs (hook_cost.py) while CUPTI still calls back; the anchors
        made for it are not kept."""
        if self.call is None:
            return
        kept = self.pending()
        try:
            self.cost = {"ns_per_anchor": hook_cost.anchor_cost_ns(self.call)}
        except Exception as exc:  # noqa: BLE001
            ctx.diag("info", f"the cost of launch anchors was not measured: {type(exc).__name__}: {exc}")
        self.forget_since(kept)

    def take_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Return the anchors since the last call as one ``anchor_log`` row: the clock offset and the
        anchors' (time, thread, correlation id) as int64 bytes, which the launcher makes ``launch_call``
        rows of (trace/anchor_log.py): a flush hands thousands of anchors over without a Python object
        each."""
        blob = self.take_bytes()
        return {"anchor_log": [(self.offset, blob)]} if blob else {}

    def take_bytes(self) -> bytes:
        """The anchors since the last call, as native int64 triples (time, thread, correlation id)."""
        rows, self._rows = self._rows, []
        return array("q", itertools.chain.from_iterable(rows)).tobytes()

    def take(self) -> list[tuple[Any, ...]]:
        """Return the rows recorded since the last call: ``(start_ns, end_ns, tid, api, correlation id)``."""
        rows, self._rows = self._rows, []
        return [(t + self.offset, t + self.offset, tid, ANCHOR_API, corr) for t, tid, corr in rows]


class NativeAnchors(CallbackAnchors):
    """Anchors made in C (handoff.c's ``gs_anchor``): :attr:`call` is the C function itself, and the
    rows are kept there until :meth:`take`."""

    def __init__(self, shim: Any, offset_ns: int, call: Callable[[], Any]) -> None:
        self.offset = offset_ns
        self.call = call
        self.cost = {}
        self.missing = []
        self._shim = shim

    def pending(self) -> int:
        return int(self._shim.gs_anchors_pending())

    def shutdown(self, ctx: Context) -> None:
        """Measure the anchor's cost, and say how many anchors C could not keep (no memory)."""
        super().shutdown(ctx)
        lost = int(self._shim.gs_anchors_lost())
        if lost:
            ctx.diag("warning", f"{lost} launch anchors were lost (no memory to keep them): GPU work launched "
                                "near them may be placed in the wrong range")

    def forget_since(self, pending: int) -> None:
        self._shim.gs_anchors_forget_since(pending)

    def take_bytes(self) -> bytes:
        parts = []
        while n := self.pending():
            buf = (ctypes.c_int64 * (3 * n))()
            got = int(self._shim.gs_anchors_take(buf, n))
            parts.append(bytes(memoryview(buf).cast("B")[: 3 * 8 * got]))
            if got < n:
                break
        return b"".join(parts)

    def take(self) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        while n := self.pending():
            buf = (ctypes.c_int64 * (3 * n))()
            got = int(self._shim.gs_anchors_take(buf, n))
            off = self.offset
            rows += [(buf[3 * i] + off, buf[3 * i] + off, buf[3 * i + 1], ANCHOR_API, buf[3 * i + 2])
                     for i in range(got)]
            if got < n:
                break
        return rows


def _native(hub: CallbackHub, ctx: Context) -> NativeAnchors | None:
    """Anchors made in C where the hub's subscriber is C, else None."""
    shim = hub.native
    if shim is None or os.environ.get(NATIVE_ANCHORS_ENV) == "0":
        return None
    from . import native  # noqa: PLC0415

    fn = ctypes.CDLL("libcuda.so.1").cuDriverGetVersion
    if not hub.native_anchor(ANCHOR_API, fn):
        return None
    return NativeAnchors(shim, ctx.clock_offset_ns, native.anchor_function(shim))


def start(ctx: Context, module: Any = None) -> CallbackAnchors | None:
    """Mark the ends of recorded ranges among CUDA calls (with ``cuda``, where its API calls are not
    all recorded anyway); return the anchors, or None (said as a warning where they were wanted)."""
    hub = ctx.collector("cuda-callbacks")
    if hub is None or "cuda-api" in ctx.trace or os.environ.get(ANCHORS_ENV) == "0":
        return None
    try:
        made_in_c = _native(hub, ctx)
        if made_in_c is not None:
            return made_in_c
    except (OSError, AttributeError, RuntimeError) as exc:  # anchors through Python instead
        ctx.diag("info", f"launch anchors go through a Python callback: {exc}")
    try:
        call = anchor_call()
    except (OSError, AttributeError) as exc:
        ctx.diag("warning", f"GPU work is placed in ranges by its GPU start only: {exc}")
        return None
    anchors = CallbackAnchors(hub, ctx.clock_offset_ns, call)
    if anchors.missing:
        ctx.diag("warning", f"GPU work is placed in ranges by its GPU start only: no CUPTI callback for {ANCHOR_API}")
        return None
    return anchors
