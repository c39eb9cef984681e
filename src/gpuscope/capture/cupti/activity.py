"""CUDA activity capture through CUPTI (the ``cupti-python`` bindings), inside the profiled process.

CUPTI hands over buffers of activity records on its own thread. The target pays for this with the
GIL, so no Python work is done per record: buffers are taken in raw through CUPTI's C API and read
with numpy per run of same-kind records (cupti_buffers.py). Where that is not possible, cupti-python's
callback hands over one object per record; then only each object's address is read, and the records
are copied in blocks. Either way records are grouped by struct type and the few distinct string
pointers (kernel names) resolved; they leave the process as packed CUPTI structs, decoded by the
launcher (trace/decode.py).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

from ...spool import SpoolWriter
from .records import RecordShipping

if TYPE_CHECKING:
    from ..collectors import Context

NVTX_INJECTION_ENV = "NVTX_INJECTION64_PATH"
# Knobs for measuring what each part of the collection costs (bench/overhead.py); not for users.
KINDS_ENV = "GPUSCOPE_CUPTI_KINDS"  # comma-separated labels of _kinds() to keep
# "1": kernel queued/submitted timestamps (each launch then costs about 2.3 µs more and the program's
# memory grows with the kernels launched; launch anchors place kernels instead: launch_anchors.py)
LATENCY_ENV = "GPUSCOPE_LATENCY_TIMESTAMPS"
RAW_ENV = "GPUSCOPE_RAW_BUFFERS"  # "0": take records through cupti-python's per-record objects
LAUNCH_COST_ENV = "GPUSCOPE_LAUNCH_COST"  # "0": CUPTI's cost per launch not measured at the end
VERIFY_ENV = "GPUSCOPE_VERIFY_WALK"  # "1": check every buffer's walk against CUPTI's iterator
BUFFER_SIZE = 8 * 1024 * 1024
# Runs of one struct type written one by one up to this many; beyond, joined first.
MAX_PARTS = 64
# Record kinds left on outside a capture window: few records, and needed whatever the window (memory: the
# totals of a window count what was allocated before it; the report is cut to the windows when written).
ALWAYS_ON = ("device", "context", "overhead", "memory", "memory-pool")

Diag = Callable[[str, str], None]


def start(ctx: Context, module: Any = None) -> CuptiCollector | None:
    """Start CUPTI's activity records, whose clock becomes the session's; return the collector, or
    None (said as a warning) where CUPTI cannot record in this process."""
    collector = CuptiCollector(ctx.spool, ctx.trace, ctx.diag)
    try:
        collector.start()
    except CollectorUnavailable as exc:
        ctx.diag("warning", f"{exc}: GPU activity is not recorded; the program runs as usual")
        return None
    ctx.use_clock("cupti", collector.now)
    return collector


class CollectorUnavailable(Exception):
    """The collector cannot run here; the message says what is missing, in one line."""


def struct_dtypes(cupti_module: Any) -> dict[str, Any]:
    """Map CUPTI record class names (``ActivityKernel11``) to the numpy dtypes of their structs."""
    from .memory_records import EXTRA_STRUCTS  # noqa: PLC0415

    out = {}
    for attr in dir(cupti_module):
        if attr.startswith("activity_") and attr.endswith("_dtype"):
            key = attr[: -len("_dtype")].replace("_", "").lower()
            out[key] = getattr(cupti_module, attr)
    for name, dt in EXTRA_STRUCTS.items():  # versions this cupti-python lacks (memory_records.py)
        out.setdefault(name.lower(), dt)
    return out


def _kinds(cupti: Any, trace: set[str]) -> list[tuple[str, Any]]:
    """Return the activity kinds to enable for ``trace``; the first of them is required."""
    k = cupti.ActivityKind
    kinds = []
    if "cuda" in trace:
        kinds += [
            ("kernel", k.CONCURRENT_KERNEL),
            ("device", k.DEVICE),
            ("context", k.CONTEXT),
            ("memcpy", k.MEMCPY),
            ("memset", k.MEMSET),
            ("overhead", k.OVERHEAD),
        ]
    if "cuda-graph" in trace:
        kinds += [("graph", k.GRAPH_TRACE)]
    if "cuda-api" in trace:
        # CUPTI's synchronization records cost as much as API tracing in launch-bound programs
        # (bench/RESULTS.md); host waits are recorded by default as synchronization sites instead.
        kinds += [("runtime", k.RUNTIME), ("driver", k.DRIVER), ("sync", k.SYNCHRONIZATION)]
    if "nvtx" in trace:
        kinds += [("nvtx", k.MARKER)]
    if "memory" in trace and "cuda" in trace:  # every CUDA-level allocation, of any library (memory_records.py)
        kinds += [("memory", k.MEMORY2), ("memory-pool", k.MEMORY_POOL)]
    keep = os.environ.get(KINDS_ENV)
    if keep:
        kinds = [kd for kd in kinds if kd[0] in keep.split(",")]
    return kinds


def loaded_library(fragment: str) -> str | None:
    """Return the path of the shared library loaded in this process whose name has ``fragment``."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.rstrip("\n").partition("/")[2]
                if fragment in path.rpartition("/")[2]:
                    return "/" + path
    except OSError:
        return None
    return None


class CuptiCollector(RecordShipping):
    """Enables CUPTI activity kinds and ships completed buffers to the spool."""

    def __init__(self, spool: SpoolWriter, trace: set[str], diag: Diag) -> None:
        self.spool = spool
        self.trace = trace
        self.diag = diag
        self.records = 0
        self.buffers = 0
        self.copied_buffers = 0  # buffers whose records were not all in one block
        self.failed_records = 0
        self.callback_ns = 0  # CPU time of our completion callbacks (waits for the GIL excluded)
        self.enabled: list[str] = []
        self._cupti: Any = None
        self._np: Any = None
        self._buffers: Any = None  # the cupti_buffers module, imported by bind()
        self._dtypes: dict[str, Any] = {}
        self._class_dtype: dict[type, Any] = {}
        self._unsupported: set[str] = set()
        self._enabled_kinds: list[Any] = []
        self._sent_dtypes: set[str] = set()
        self._api_names: dict[tuple[str, int], int] = {}
        self._api_domains: dict[int, str] = {}
        self._stopped = False
        self.raw: Any = None  # cupti_buffers.RawBuffers, when CUPTI's buffers are read in raw
        self.failed_buffers = 0
        self.verify_walk = os.environ.get(VERIFY_ENV) == "1"
        self.walk_checked = 0  # records whose place the full walk with CUPTI's iterator checked
        self.walk_mismatches = 0
        self.ns_per_launch: int | None = None  # what the records add to a launch (launch_cost.py)
        self.ns_per_runtime_launch: int | None = None  # the same through the CUDA runtime
        self.launch_cost_kinds_off: dict[str, int] = {}  # the same against the kinds disabled, not detached
        self.launch_cost_unmeasured = ""  # why that was not measured, where it was not
        self._dropping = False  # records of gpuscope's own launches arrive: read into nothing

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Register with CUPTI and enable activity kinds; raise CollectorUnavailable if impossible."""
        try:
            from cupti import cupti  # noqa: PLC0415  (optional dependency)
            import numpy  # noqa: PLC0415
        except ImportError:
            raise CollectorUnavailable(
                f"cupti-python is not installed for {sys.executable} (pip install 'gpuscope[cuda]')"
            ) from None
        self.bind(cupti, numpy)
        try:
            cupti.get_timestamp()  # loads libcupti (and fails here without a driver)
            if not self._register_raw():
                cupti.activity_register_callbacks(self._on_request, self._on_complete)
        except Exception as exc:  # noqa: BLE001  (cupti raises its own error types)
            raise CollectorUnavailable(explain(exc)) from None
        self._set_thread_id_type()
        for label, kind in _kinds(cupti, self.trace):
            try:
                cupti.activity_enable(kind)
            except Exception as exc:  # noqa: BLE001
                if not self._enabled_kinds:
                    raise CollectorUnavailable(explain(exc)) from None
                self.diag("warning", f"CUPTI could not record {label} activity: {explain(exc)}")
                continue
            self._enabled_kinds.append(kind)
            self.enabled.append(label)
        if "cuda" in self.trace and os.environ.get(LATENCY_ENV) == "1":
            try:
                cupti.activity_enable_latency_timestamps(1)
            except Exception as exc:  # noqa: BLE001
                self.diag("warning", f"CUPTI kernel queue timestamps are not available: {explain(exc)}")
        if "nvtx" in self.enabled:
            self._inject_nvtx()

    def _inject_nvtx(self) -> None:
        """Make NVTX hand its calls to CUPTI: NVTX loads the library named by NVTX_INJECTION64_PATH
        at a process's first NVTX call, which comes after this agent has started."""
        lib = loaded_library("libcupti.so")
        current = os.environ.get(NVTX_INJECTION_ENV)
        if lib is None:
            self.diag("warning", "NVTX ranges are not recorded: the loaded libcupti was not found")
        elif current and os.path.realpath(current) != os.path.realpath(lib):
            self.diag("warning", f"NVTX ranges go to the tool in {NVTX_INJECTION_ENV}={current}, not to gpuscope")
        else:
            os.environ[NVTX_INJECTION_ENV] = lib

    def _register_raw(self) -> bool:
        """Take CUPTI's buffers through its C API (cupti_buffers.py); False where that is not possible."""
        lib = loaded_library("libcupti.so")
        if lib is None or os.environ.get(RAW_ENV) == "0":
            return False
        try:
            raw = self._buffers.RawBuffers.load(lib, BUFFER_SIZE, self._on_raw_buffer, self._on_raw_error)
        except Exception as exc:  # noqa: BLE001
            self.diag("info", f"CUPTI buffers go through cupti-python's per-record objects: {explain(exc)}")
            return False
        from . import native  # noqa: PLC0415

        try:
            raw.use_native(native.load())
        except native.NativeUnavailable as exc:
            self.diag("warning", f"CUPTI's buffers are handed over by Python callbacks ({exc}); a program that "
                      "loads CUDA modules while holding the GIL (torch.compile) may then hang")
        try:
            raw.register()
        except Exception as exc:  # noqa: BLE001
            self.diag("info", f"CUPTI buffers go through cupti-python's per-record objects: {explain(exc)}")
            return False
        self.raw = raw
        return True

    def bind(self, cupti: Any, numpy: Any) -> None:
        """Learn the record layouts of this cupti-python (no driver needed)."""
        from . import buffers as cupti_buffers  # noqa: PLC0415  (needs numpy, which the agent itself does not)

        self._cupti, self._np, self._buffers = cupti, numpy, cupti_buffers
        self._dtypes = struct_dtypes(cupti)
        self._strides = cupti_buffers.StrideTable(cupti_buffers.struct_versions(cupti, self._dtypes))
        self._api_domains = {
            int(cupti.ActivityKind.RUNTIME): "runtime",
            int(cupti.ActivityKind.DRIVER): "driver",
        }

    def flush(self, forced: bool = False) -> None:
        """Ask CUPTI to hand over what it holds; ``forced`` also hands over incomplete records. A
        failure is said as a warning (the next flush tries again)."""
        if self._enabled_kinds and not self._stopped:
            try:
                self._flush_all(forced)
            except Exception as exc:  # noqa: BLE001
                self.diag("warning", f"CUPTI flush failed: {exc}")

    def _flush_all(self, forced: bool) -> None:
        """Have CUPTI complete its buffers, and read them (raw buffers) or take its records."""
        if self.raw is not None:
            self.raw.flush_all(forced)
        else:
            self._cupti.activity_flush_all(1 if forced else 0)

    def take_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Nothing: CUPTI's records reach the spool as raw buffers, through :meth:`flush`."""
        return {}

    def set_collecting(self, on: bool) -> None:
        """Enable (``on``) or disable the record kinds a capture range limits (all but ALWAYS_ON).

        Records of work started while they were enabled may still arrive after they are disabled;
        the report is trimmed to the capture windows when written.
        """
        if self._stopped:
            return
        switch = self._cupti.activity_enable if on else self._cupti.activity_disable
        for label, kind in zip(self.enabled, self._enabled_kinds):
            if label in ALWAYS_ON:
                continue
            try:
                switch(kind)
            except Exception as exc:  # noqa: BLE001  (cupti raises its own error types)
                self.diag("warning", f"CUPTI could not turn {label} records {'on' if on else 'off'}: "
                          f"{explain(exc)}")

    def stop(self) -> None:
        """Deliver everything CUPTI still holds and detach from CUPTI."""
        if not self._enabled_kinds or self._stopped:
            return
        try:
            try:
                self._flush_all(True)
            finally:
                self._report_dropped()  # before detaching, which forgets the count
            self._measure_launch_cost()  # detaches from CUPTI where it measures
        finally:
            self._detach()
            if self.raw is not None:
                self.raw.drain()  # buffers CUPTI completed while detaching

    def _detach(self) -> None:
        """Disable every kind and detach from CUPTI (once)."""
        if self._stopped:
            return
        for kind in self._enabled_kinds:
            try:
                self._cupti.activity_disable(kind)
            except Exception:  # noqa: BLE001,S112  (disabling at exit; nothing left to report to)
                continue
        self._stopped = True
        try:
            # Detaching keeps CUPTI from calling into Python after the interpreter is gone.
            self._cupti.finalize()
        except Exception as exc:  # noqa: BLE001
            self.diag("warning", f"CUPTI did not detach cleanly: {explain(exc)}")

    def _measure_launch_cost(self) -> None:
        """Measure what the records add to one kernel launch (launch_cost.py), after the program's
        records are all delivered: launches with every kind on and off in turn, then detached from
        CUPTI (disabling the kinds leaves most of CUPTI's work in each launch in place). The records
        of the measurement's launches are dropped."""
        if os.environ.get(LAUNCH_COST_ENV) == "0" or "kernel" not in self.enabled:
            return
        lib = loaded_library("libcuda.so")
        if lib is None:
            self.launch_cost_unmeasured = "libcuda not loaded"
            return
        from . import launch_cost  # noqa: PLC0415

        runtime = loaded_library("libcudart.so")
        self._dropping = True
        try:
            cost = launch_cost.measure(ctypes.CDLL(lib), self._switch_every_kind,
                                       ctypes.CDLL(runtime) if runtime else None, detach=self._detach_dropping)
            self.ns_per_launch, self.ns_per_runtime_launch = cost["driver"], cost.get("runtime")
            self.launch_cost_kinds_off = {k: v for k, v in cost.items() if k.endswith("kinds_off")}
        except Exception as exc:  # noqa: BLE001  (Unmeasured, or CUPTI's own errors: the run's records stay)
            self.launch_cost_unmeasured = explain(exc) if not isinstance(exc, launch_cost.Unmeasured) else str(exc)
        finally:
            try:
                if not self._stopped:
                    self._flush_all(True)
                elif self.raw is not None:
                    self.raw.drain()
            finally:
                self._dropping = False

    def _switch_every_kind(self, on: bool) -> None:
        """Enable or disable every kind this collector enabled, those a capture window leaves on
        included."""
        switch = self._cupti.activity_enable if on else self._cupti.activity_disable
        for kind in self._enabled_kinds:
            switch(kind)

    def _detach_dropping(self) -> None:
        """Deliver the measurement's records (to be dropped) and detach from CUPTI."""
        self._flush_all(True)
        self._detach()

    def shutdown(self, ctx: Context) -> None:
        """Stop (:meth:`stop`) and add the ``collector`` row: records, buffers, the callbacks' CPU time."""
        try:
            self.stop()
        except Exception as exc:  # noqa: BLE001
            ctx.add_row("diagnostic", (ctx.now_ns(), "error", f"CUPTI stop failed: {exc}"))
        detail = f"kinds={','.join(self.enabled)} copied_buffers={self.copied_buffers}"
        if self.raw is not None:
            detail += f" raw_buffers={self.raw.buffers_allocated} failed_buffers={self.failed_buffers}"
        detail += f" anchors={'on' if ctx.collector('launch-anchors') is not None else 'off'}"
        if self.ns_per_launch is not None:
            detail += f" ns_per_launch={self.ns_per_launch}"
        if self.ns_per_runtime_launch is not None:
            detail += f" ns_per_runtime_launch={self.ns_per_runtime_launch}"
        for path, ns in sorted(self.launch_cost_kinds_off.items()):
            detail += f" ns_per_{path}={ns}"
        if self.ns_per_launch is None and self.launch_cost_unmeasured:
            why = f"CUPTI's cost per kernel launch was not measured: {self.launch_cost_unmeasured}"
            ctx.add_row("diagnostic", (ctx.now_ns(), "info", why))
        if self.verify_walk:
            detail += f" walk_checked={self.walk_checked} walk_mismatches={self.walk_mismatches}"
        ctx.add_row("collector", ("cupti", self.records, self.buffers, self.callback_ns, self.failed_records, detail))

    @property
    def cupti_module(self) -> Any:
        """The ``cupti`` module this collector is bound to."""
        return self._cupti

    def now(self) -> int:
        """Return CUPTI's current timestamp (ns)."""
        return int(self._cupti.get_timestamp())

    # -- CUPTI callbacks (CUPTI's thread) --------------------------------------------------
    def _on_request(self) -> tuple[int, int]:
        return BUFFER_SIZE, 0

    def _on_complete(self, activities: list[Any]) -> None:
        t0 = time.thread_time_ns()
        try:
            if activities and not self._stopped and not self._dropping:
                self._ship(activities)
        except BaseException as exc:  # noqa: BLE001  (an exception here would drop the buffer silently)
            self.failed_records += len(activities)
            self.diag("error", f"lost {len(activities)} CUDA records: {type(exc).__name__}: {exc}")
        finally:
            self.callback_ns += time.thread_time_ns() - t0

    def _on_raw_buffer(self, raw: Any, valid: int, next_record: Any) -> None:
        """Ship the records of one of CUPTI's buffers, read in place (CUPTI's thread)."""
        if self._dropping:
            return
        buffers = self._buffers
        t0 = time.thread_time_ns()
        try:
            runs = buffers.walk(raw, valid, self._strides, next_record)
            if self.verify_walk:
                got, want = buffers.run_offsets(runs), buffers.full_walk(valid, next_record)
                self.walk_checked += len(want)
                self.walk_mismatches += len(set(got) ^ set(want))
            by_kind: dict[int, list[Any]] = {}
            for kind, off, n, stride in runs:
                if stride:
                    by_kind.setdefault(kind, []).append(raw[off : off + n * stride])
                else:
                    self._unsupported_record(f"kind {kind}", n)
            blocks = []
            for kind, parts in by_kind.items():
                name = self._strides.struct[kind]
                if len(parts) > MAX_PARTS:  # many short runs: one copy beats many small writes
                    parts = [self._np.concatenate(parts)]
                blocks.append((name, self._dtypes[name.lower()], parts))
            self._ship_blocks(blocks)
        finally:
            self.callback_ns += time.thread_time_ns() - t0

    def _on_raw_error(self, exc: BaseException) -> None:
        self.failed_buffers += 1
        self.diag("error", f"lost a buffer of CUDA records: {type(exc).__name__}: {exc}")

    def _set_thread_id_type(self) -> None:
        kind = getattr(self._cupti, "ActivityThreadIdType", None)
        if kind is not None and hasattr(kind, "SYSTEM"):
            try:
                self._cupti.set_thread_id_type(kind.SYSTEM)
            except Exception as exc:  # noqa: BLE001
                self.diag("warning", f"CUPTI thread ids are not system ids: {explain(exc)}")

    def _report_dropped(self) -> None:
        try:
            dropped = ctypes.c_size_t(0)
            self._cupti.activity_get_num_dropped_records(0, 0, ctypes.addressof(dropped))
            count = int(dropped.value)
        except Exception as exc:  # noqa: BLE001
            self.diag("warning", f"could not read CUPTI's dropped-record count: {explain(exc)}")
            return
        self.spool.write(rows={"dropped": [("cupti", count), ("gpuscope", self.failed_records)]})


def explain(exc: BaseException) -> str:
    """Return a CUPTI failure as one line that says what is wrong here (no driver, no permission, ...)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "libcuda" in text or "driver is not found" in text.lower():
        return "no CUDA driver found (libcuda.so.1 could not be loaded)"
    if "INSUFFICIENT_PRIVILEGES" in text:
        return "CUPTI is not permitted to trace here (insufficient privileges)"
    if "MULTIPLE_SUBSCRIBERS" in text or "MAX_LIMIT_REACHED" in text:
        return "another CUPTI client (torch.profiler, Nsight, ...) is already attached to this process"
    return text
