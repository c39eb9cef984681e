"""CUPTI's callback API inside the profiled process: one subscriber, handlers per API function.

CUPTI allows one callback subscriber per process, so every collector that needs to run code at
the entry or exit of a CUDA API call (synchronization sites, capture ranges) registers a handler
here by function name. Only the callback ids of those functions are enabled: a program pays for
a Python callback on those calls alone, never on kernel launches.

A runtime API call is usually carried out by driver API calls; when handlers watch both layers,
a driver call made inside a watched runtime call of the same thread is not reported again.

Where gpuscope's C callbacks are loaded (native.py, the ones that read CUPTI's buffers), the
subscriber is C: it handles launch anchors itself, without Python (launch_anchors.py), and
forwards every other watched call to the hub's handlers; otherwise cupti-python's subscriber
calls the hub for every watched call, anchors included.
"""

from __future__ import annotations

import ctypes
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .activity import explain

if TYPE_CHECKING:
    from ..collectors import Context

Handler = Callable[[str, int], None]  # (api name, correlation id), on the calling thread
Diag = Callable[[str, str], None]

_VERSION = re.compile(r"(_v\d+)?(_ptsz|_ptds)?(_v\d+)?$")


def base_name(cbid_name: str) -> str:
    """Return the API function a CUPTI callback-id name stands for: ``cudaStreamSynchronize_ptsz_v7000``
    and ``cuStreamSynchronize_ptsz`` give ``cudaStreamSynchronize`` and ``cuStreamSynchronize``."""
    return _VERSION.sub("", cbid_name)


def start(ctx: Context, module: Any = None) -> CallbackHub | None:
    """Subscribe to CUPTI's callback API (where CUPTI's activity records started); return the hub its
    subscribers register with, or None (said as a warning) where another subscriber holds the process."""
    cupti = ctx.collector("cuda")
    if cupti is None:
        return None
    raw = getattr(cupti, "raw", None)
    shim = getattr(raw, "native", None)
    hub = CallbackHub(cupti.cupti_module, ctx.diag, native=(shim, raw._lib) if shim is not None else None)
    try:
        hub.start()
    except Exception as exc:  # noqa: BLE001  (cupti raises its own error types)
        ctx.diag("warning", f"synchronization sites are not recorded: {explain(exc)}")
        return None
    return hub


class CallbackHub:
    """Subscribes to CUPTI once and calls the handlers registered for API functions."""

    def __init__(self, cupti: Any, diag: Diag, native: tuple[Any, Any] | None = None) -> None:
        self._cupti = cupti
        self._diag = diag
        self._native = native  # (gpuscope's C library, libcupti) where the subscriber is C
        self._forward: Any = None  # the C subscriber's way to the handlers (kept alive while subscribed)
        self._subscriber: Any = None
        # (domain, cbid) -> (api name, enter handlers, exit handlers)
        self._table: dict[tuple[int, int], tuple[str, list[Handler], list[Handler]]] = {}
        self._entry_only: dict[int, Callable[[int], None]] = {}  # cbid -> handler(correlation id)
        self._timed: list[tuple[int, int]] = []  # (domain, cbid) timed by the C subscriber itself
        self._runtime = int(cupti.CallbackDomain.RUNTIME_API)
        self._driver = int(cupti.CallbackDomain.DRIVER_API)
        self._enter_site = int(cupti.ApiCallbackSite.API_ENTER)
        self._local = threading.local()
        self.calls = 0
        self.failures = 0

    @property
    def native(self) -> Any:
        """gpuscope's C library where it is CUPTI's subscriber (anchors made there), else None."""
        return self._native[0] if self._native is not None else None

    def start(self) -> None:
        """Subscribe to CUPTI; raises when another subscriber holds the process."""
        if self._native is None:
            self._subscriber = int(self._cupti.subscribe(self._callback, None))
            return
        shim, lib = self._native
        forward = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint32)
        self._forward = forward(self._forwarded)
        shim.gs_set_forward(ctypes.cast(self._forward, ctypes.c_void_p))
        handle = ctypes.c_void_p()
        rc = lib.cuptiSubscribe(ctypes.byref(handle), ctypes.cast(shim.gs_api_callback, ctypes.c_void_p), None)
        if rc != 0:
            shim.gs_set_forward(None)
            raise RuntimeError(f"cuptiSubscribe returned {_result_name(self._cupti, rc)}")
        self._subscriber = handle

    def stop(self) -> None:
        """Unsubscribe: no handler runs after this returns."""
        if self._subscriber is not None:
            sub, self._subscriber = self._subscriber, None
            if self._native is None:
                self._cupti.unsubscribe(sub)
            else:
                self._native[1].cuptiUnsubscribe(sub)
                self._native[0].gs_set_forward(None)
                self._native[0].gs_clear_timed()
                self._timed = []

    def _enable(self, on: bool, domain: int, cbid: int) -> None:
        if self._native is None:
            self._cupti.enable_callback(1 if on else 0, self._subscriber, domain, cbid)
            return
        rc = self._native[1].cuptiEnableCallback(ctypes.c_uint32(1 if on else 0), self._subscriber,
                                                 ctypes.c_int(domain), ctypes.c_uint32(cbid))
        if rc != 0:
            raise RuntimeError(f"cuptiEnableCallback returned {_result_name(self._cupti, rc)}")

    # -- the collector protocol (capture/collectors.py) ---------------------------------------
    def set_collecting(self, on: bool) -> None:
        """Nothing: each subscriber decides what it records outside a capture window."""

    def take_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Nothing: the subscribers hold the rows."""
        return {}

    def shutdown(self, ctx: Context) -> None:
        """Unsubscribe (after the subscribers have stopped); a failure is said as a warning."""
        try:
            self.stop()
        except Exception as exc:  # noqa: BLE001
            ctx.add_row("diagnostic", (ctx.now_ns(), "warning", f"CUPTI callbacks did not stop: {exc}"))

    def on_api(self, names: list[str], enter: Handler | None = None, exit: Handler | None = None) -> list[str]:
        """Call ``enter``/``exit`` at the entry/exit of the runtime or driver API functions named;
        return the names no callback id was found for."""
        wanted = set(names)
        found: set[str] = set()
        for domain, enum in ((self._runtime, self._cupti.runtime_api_trace_cbid),
                             (self._driver, self._cupti.driver_api_trace_cbid)):
            for member in enum:
                name = base_name(member.name)
                if name not in wanted:
                    continue
                key = (domain, int(member.value))
                entry = self._table.setdefault(key, (name, [], []))
                if enter is not None:
                    entry[1].append(enter)
                if exit is not None:
                    entry[2].append(exit)
                if self._subscriber is not None:
                    self._enable(True, domain, key[1])
                found.add(name)
        return sorted(wanted - found)

    def native_anchor(self, name: str, fn: Any) -> bool:
        """Have the C subscriber keep the correlation id of each call of the driver function
        ``name`` (made through ``fn``, a C function pointer, by ``gs_anchor``); return False where
        the subscriber is not C or no callback id was found for ``name``."""
        if self._native is None or self._subscriber is None:
            return False
        shim = self._native[0]
        for member in self._cupti.driver_api_trace_cbid:
            if base_name(member.name) == name:
                shim.gs_set_anchor(self._driver, int(member.value), ctypes.cast(fn, ctypes.c_void_p))
                try:
                    self._enable(True, self._driver, int(member.value))
                except Exception:
                    shim.gs_set_anchor(0, 0xFFFFFFFF, None)  # the call's callbacks go to Python again
                    raise
                return True
        return False

    def native_timed(self, names: list[str]) -> dict[int, str]:
        """Have the C subscriber time every call of the runtime or driver functions named (entry to
        exit, its thread and correlation id; a driver call inside a timed runtime call of the same
        thread not again) without any Python callback; return their keys (``domain << 32 | callback
        id``, as the C rows carry them) -> names, {} where the subscriber is not C or has no room
        (then nothing is timed in C)."""
        if self._native is None or self._subscriber is None:
            return {}
        shim = self._native[0]
        wanted = set(names)
        got = {(domain << 32) | int(m.value): base_name(m.name)
               for domain, enum in ((self._runtime, self._cupti.runtime_api_trace_cbid),
                                    (self._driver, self._cupti.driver_api_trace_cbid))
               for m in enum if base_name(m.name) in wanted}
        keys = [(key >> 32, key & 0xFFFFFFFF) for key in got]
        if any(shim.gs_set_timed(*key) != 0 for key in keys):
            shim.gs_clear_timed()  # all or none: a call left to Python is not timed twice
            for key in self._timed:
                shim.gs_set_timed(*key)
            return {}
        for key in keys:
            self._enable(True, *key)
        self._timed += keys
        return got

    def native_graph_watch(self, names: list[str]) -> bool:
        """Have the C subscriber watch the entry of the driver functions named (graph instantiation,
        graph_level.py) without any Python callback; False where the subscriber is not C or none of
        them has a callback id here."""
        if self._native is None or self._subscriber is None:
            return False
        shim, wanted = self._native[0], set(names)
        cbids = [int(m.value) for m in self._cupti.driver_api_trace_cbid if base_name(m.name) in wanted]
        if not cbids or any(shim.gs_set_graph_watch(self._driver, cbid) != 0 for cbid in cbids):
            return False
        for cbid in cbids:
            self._enable(True, self._driver, cbid)
        return True

    def on_api_entry(self, names: list[str], handler: Callable[[int], None]) -> list[str]:
        """Call ``handler(correlation id)`` at the entry of the driver API functions named, with as
        little work as possible (no nesting bookkeeping; for calls gpuscope makes itself); return
        the names no callback id was found for. Not switched off by :meth:`set_enabled`."""
        wanted = set(names)
        found: set[str] = set()
        for member in self._cupti.driver_api_trace_cbid:
            name = base_name(member.name)
            if name in wanted:
                self._entry_only[int(member.value)] = handler
                if self._subscriber is not None:
                    self._enable(True, self._driver, int(member.value))
                found.add(name)
        return sorted(wanted - found)

    def set_enabled(self, on: bool) -> None:
        """Turn every registered callback on or off (the subscription stays)."""
        if self._subscriber is None:
            return
        for domain, cbid in [*self._table, *self._timed]:
            self._enable(on, domain, cbid)
        if self._timed:
            self._native[0].gs_timed_reset()  # type: ignore[index]  # a call open now sees no exit

    # -- CUPTI's call, on the thread that made the API call ----------------------------------
    def _data(self, cbdata: Any) -> Any:
        """The call's CallbackData, whether cupti-python passed the object or its address."""
        return cbdata if hasattr(cbdata, "callback_site") else self._cupti.CallbackData.from_ptr(cbdata)

    def _callback(self, userdata: Any, domain: Any, cbid: Any, cbdata: Any) -> None:
        """cupti-python's subscriber calls here: the call's data is decoded, then handled as the C
        subscriber's calls are (CUPTI calls back only for the callback ids enabled)."""
        try:
            data = self._data(cbdata)
            site, corr = int(data.callback_site), int(data.correlation_id)
        except BaseException as exc:  # noqa: BLE001  (nothing may reach the program's CUDA call)
            self._failed(exc)
            return
        self._forwarded(int(domain), int(cbid), site, corr)

    def _forwarded(self, domain: int, cbid: int, site: int, correlation_id: int) -> None:
        """The C subscriber calls here (ctypes takes the GIL), and :meth:`_callback`."""
        try:
            fast = self._entry_only.get(cbid)
            if fast is not None and domain == self._driver:
                if site == self._enter_site:
                    fast(correlation_id)
                return
            entry = self._table.get((domain, cbid))
            if entry is not None:
                self._dispatch(entry, site == self._enter_site, correlation_id)
        except BaseException as exc:  # noqa: BLE001
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        if self.failures == 1:
            self._diag("warning", f"a CUDA API callback failed: {type(exc).__name__}: {exc}")

    def _dispatch(self, entry: tuple[str, list[Handler], list[Handler]], enter: bool, corr: int) -> None:
        """Call the handlers of a watched call's entry or exit, skipping driver calls made inside a
        watched runtime call of the same thread."""
        local = self._local
        depth = getattr(local, "depth", 0)
        if enter:
            local.depth = depth + 1
            if depth:
                return  # a driver call inside a watched runtime call
            handlers = entry[1]
        else:
            local.depth = max(depth - 1, 0)
            if depth > 1:
                return
            handlers = entry[2]
        self.calls += 1
        for h in handlers:
            h(entry[0], corr)


def _result_name(cupti: Any, rc: int) -> str:
    try:
        return str(cupti.Result(rc).name)
    except Exception:  # noqa: BLE001
        return str(rc)


class TimedCalls:
    """Records the watched API calls' host start and end on the calling thread, as rows
    ``(start_ns, end_ns, tid, api name, correlation id, *context)`` on the session clock.

    ``context`` is what a subclass notes at a call's entry (a Python stack, say); nothing by default.
    """

    TABLE = "launch_call"

    def __init__(self, hub: CallbackHub, names: list[str], offset_ns: int) -> None:
        self.offset = offset_ns
        self.collecting = True  # False outside a capture window
        self._local = threading.local()
        self._rows: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self.missing = hub.on_api(names, enter=self._enter, exit=self._exit)

    def set_collecting(self, on: bool) -> None:
        """Time the watched calls (``on``), or let them pass."""
        self.collecting = on

    def take_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Return the rows recorded since the last call, in the subclass's ``TABLE``."""
        rows = self.take()
        return {self.TABLE: rows} if rows else {}

    def take(self) -> list[tuple[Any, ...]]:
        """Return the rows recorded since the last call."""
        with self._lock:
            rows, self._rows = self._rows, []
        return rows

    def context(self) -> tuple[Any, ...]:
        """Return the extra fields of the call being entered (called on its thread)."""
        return ()

    def _enter(self, name: str, correlation_id: int) -> None:
        if self.collecting:
            self._local.open = (time.monotonic_ns(), self.context())

    def _exit(self, name: str, correlation_id: int) -> None:
        end = time.monotonic_ns()
        opened = getattr(self._local, "open", None)
        if opened is None:
            return
        self._local.open = None
        row = (opened[0] + self.offset, end + self.offset, threading.get_native_id(), name, correlation_id,
               *opened[1])
        with self._lock:
            self._rows.append(row)
