"""CUPTI's activity buffers, taken in raw through CUPTI's C API.

cupti-python's buffer callback hands over one Python object per record, built while the
callback's thread holds the GIL: in a launch-bound program, that per-record work is taken from
the program's own Python thread. Here gpuscope registers its own C-level buffer callbacks with the
libcupti that cupti-python loaded, keeps a pool of buffers it owns, and reads a completed buffer
with numpy: records of one kind that follow each other are found by their stride and read as one
array, and CUPTI's own ``cuptiActivityGetNextRecord`` is asked only where a run of records ends.
So the cost of a buffer grows with the number of runs in it, not with the number of records.

The walk relies on two facts that CUPTI's record iterator also relies on: every record starts with
its ``CUpti_ActivityKind`` (a u32), and records of a kind have one size (the struct version this
CUPTI writes, told apart by that size). Buffers are zeroed before CUPTI gets them, so bytes CUPTI
skipped read as kind 0 and end a run. ``GPUSCOPE_VERIFY_WALK=1`` checks every buffer against a
walk with CUPTI's iterator, record by record, and counts the differences.
"""

from __future__ import annotations

import ctypes
from collections import deque
from typing import Any, Callable

import numpy as np

from .memory_records import EXTRA_STRUCTS

# CUpti_ActivityKind -> the struct family of its records (the version is told by the record size).
KIND_STRUCT = {
    1: "ActivityMemcpy", 2: "ActivityMemset", 3: "ActivityKernel", 4: "ActivityAPI", 5: "ActivityAPI",
    8: "ActivityDevice", 9: "ActivityContext", 10: "ActivityKernel", 12: "ActivityMarker",
    17: "ActivityOverhead", 22: "ActivityMemcpyPtoP", 38: "ActivitySynchronization",
    49: "ActivityMemory", 50: "ActivityMemoryPool", 51: "ActivityGraphTrace",
}  # fmt: skip
CUPTI_SUCCESS = 0

NextRecord = Callable[[int | None], int]  # offset of the record after ``offset`` (None: the first); -1 at the end
Run = tuple[int, int, int, int]  # kind, offset of the first record, number of records, stride


def struct_versions(cupti: Any, dtypes: dict[str, Any]) -> dict[str, dict[int, str]]:
    """Map each struct family (``ActivityKernel``) to {record size: class name} in ``cupti``;
    ``dtypes`` maps lower-case class names to numpy dtypes (activity.struct_dtypes)."""
    out: dict[str, dict[int, str]] = {}
    for attr in sorted(set(dir(cupti)) | set(EXTRA_STRUCTS)):
        dt = dtypes.get(attr.lower()) if attr.startswith("Activity") else None
        if dt is None:
            continue
        for family in set(KIND_STRUCT.values()):
            rest = attr[len(family):] if attr.startswith(family) else None
            if rest is not None and (rest == "" or rest.isdigit()):
                out.setdefault(family, {})[dt.itemsize] = attr
    return out


def walk(raw: np.ndarray, valid: int, strides: StrideTable, next_record: NextRecord) -> list[Run]:
    """Return the runs of same-kind records in the first ``valid`` bytes of ``raw``.

    A run whose stride is 0 is one record gpuscope does not read (an unknown kind or version).
    ``next_record`` is CUPTI's iterator; it is asked once per run.
    """
    kinds = np.frombuffer(raw.data, dtype="<u4", count=valid // 4)
    words = memoryview(kinds)  # type: ignore[arg-type]
    runs: list[Run] = []
    off = next_record(None)
    while 0 <= off < valid:
        kind = words[off >> 2]
        stride = strides.size.get(kind)
        if stride is None:
            nxt = next_record(off)
            stride = strides.learn(kind, (nxt if nxt >= 0 else valid) - off)
            if not stride:
                runs.append((kind, off, 1, 0))
                off = nxt
                continue
        elif not stride:
            runs.append((kind, off, 1, 0))
            off = next_record(off)
            continue
        n = _run_length(kinds, words, off, stride, kind, valid)
        runs.append((kind, off, n, stride))
        off = next_record(off + (n - 1) * stride)
    return runs


def _run_length(kinds: np.ndarray, words: memoryview, off: int, stride: int, kind: int, valid: int) -> int:
    """Count the records of ``kind`` at ``off``, ``off + stride``, ... (at least 1)."""
    fit = (valid - off) // stride  # whole records that fit
    if stride % 4 or off % 4:
        return 1
    i, s = off >> 2, stride >> 2
    n = 1
    while n < fit and n < 8:  # short runs end here, without numpy's per-call cost
        if words[i + n * s] != kind:
            return n
        n += 1
    step = 64
    while n < fit:
        hi = min(n + step, fit)
        bad = kinds[i + n * s : i + (hi - 1) * s + 1 : s] != kind
        if bad.any():
            return n + int(bad.argmax())
        n, step = hi, step * 4
    return n


def full_walk(valid: int, next_record: NextRecord) -> list[int]:
    """Every record's offset, by CUPTI's iterator alone (for checking :func:`walk`)."""
    offs = []
    off = next_record(None)
    while 0 <= off < valid:
        offs.append(off)
        off = next_record(off)
    return offs


def run_offsets(runs: list[Run]) -> list[int]:
    return [off + i * stride for _, off, n, stride in runs for i in range(n)]


class StrideTable:
    """Learns, per kind, the size of this CUPTI's records and the struct class of that size."""

    def __init__(self, versions: dict[str, dict[int, str]]) -> None:
        self.versions = versions
        self.struct: dict[int, str] = {}  # kind -> class name, for the kinds gpuscope reads
        self.size: dict[int, int] = {}  # kind -> record size; 0: a kind gpuscope does not read

    def learn(self, kind: int, gap: int) -> int:
        """Learn ``kind`` from one record followed by another ``gap`` bytes on; return its size,
        or 0 when it cannot be told (that record is skipped; a later one may teach it)."""
        family = KIND_STRUCT.get(kind)
        if family is None:
            self.size[kind] = 0
            return 0
        name = self.versions.get(family, {}).get(gap)
        if name is None:
            return 0
        self.struct[kind] = name
        self.size[kind] = gap
        return gap


class RawBuffers:
    """Registers C buffer callbacks with libcupti and hands each completed buffer's bytes on.

    ``on_buffer(raw, valid, next_record)`` runs, with ``raw`` a uint8 view of the buffer valid until
    it returns, on the thread CUPTI completes the buffer on (Python callbacks), or in :meth:`drain`
    (the C callbacks of handoff.c, see :meth:`use_native`).
    """

    def __init__(self, lib: Any, iterate: Any, size: int, on_buffer: Callable[[np.ndarray, int, NextRecord], None],
                 on_error: Callable[[BaseException], None]) -> None:
        self.size = size
        self.on_buffer = on_buffer
        self.on_error = on_error
        self._lib = lib
        self._iter = iterate
        self._pool: dict[int, np.ndarray] = {}
        self._free: deque[np.ndarray] = deque()
        req = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                               ctypes.POINTER(ctypes.c_size_t))
        done = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.c_size_t)
        # CUPTI may call these until it is finalized: they live as long as this object, which the
        # collector keeps to the end of the process.
        self._callbacks: tuple[Any, Any] = (req(self._requested), done(self._completed))
        self.native: Any = None  # the C callbacks of handoff.c, once use_native() has bound them

    def use_native(self, shim: Any) -> None:
        """Register the C callbacks of ``shim`` (native.load()) instead of the Python ones: CUPTI
        then never waits for the GIL, and completed buffers wait in the shim's queue until
        :meth:`drain` (called after each flush) reads them."""
        shim.gs_set_buffer_size(self.size)
        self.native = shim
        self._callbacks = (ctypes.cast(shim.gs_requested, ctypes.c_void_p),
                           ctypes.cast(shim.gs_completed, ctypes.c_void_p))

    def drain(self) -> int:
        """Read every buffer the C callbacks have queued (nothing with the Python callbacks, which
        read each buffer as CUPTI completes it); return how many were read."""
        shim = self.native
        if shim is None:
            return 0
        n = 0
        ptr, valid = ctypes.c_void_p(), ctypes.c_size_t()
        while shim.gs_pop(ctypes.byref(ptr), ctypes.byref(valid)):
            n += 1
            base, used = int(ptr.value or 0), int(valid.value)
            try:
                raw = np.ctypeslib.as_array((ctypes.c_uint8 * self.size).from_address(base))
                self.on_buffer(raw, used, self._next_record(base, used))
            except BaseException as exc:  # noqa: BLE001  (a failing reader must not stop the others)
                self.on_error(exc)
            finally:
                shim.gs_release(base, used)
        return n

    def flush_all(self, forced: bool) -> None:
        """Have CUPTI complete its buffers (through its C API, without the GIL) and read them."""
        self._lib.cuptiActivityFlushAll(ctypes.c_uint32(1 if forced else 0))
        self.drain()

    @classmethod
    def load(cls, lib_path: str, size: int, on_buffer: Callable[[np.ndarray, int, NextRecord], None],
             on_error: Callable[[BaseException], None]) -> RawBuffers:
        """Bind to the libcupti at ``lib_path`` (the one cupti-python loaded)."""
        iterate = ctypes.PyDLL(lib_path).cuptiActivityGetNextRecord  # keeps the GIL: called once per run
        iterate.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        iterate.restype = ctypes.c_int
        return cls(ctypes.CDLL(lib_path), iterate, size, on_buffer, on_error)

    def register(self) -> None:
        rc = self._lib.cuptiActivityRegisterCallbacks(*self._callbacks)
        if rc != CUPTI_SUCCESS:
            raise RuntimeError(f"cuptiActivityRegisterCallbacks returned CUPTI error {rc}")

    @property
    def buffers_allocated(self) -> int:
        return int(self.native.gs_allocated()) if self.native is not None else len(self._pool)

    def _requested(self, buffer: Any, size: Any, max_records: Any) -> None:
        try:
            arr = self._free.popleft() if self._free else None
            if arr is None:
                arr = np.zeros(self.size, dtype=np.uint8)
                self._pool[arr.ctypes.data] = arr
            buffer[0] = arr.ctypes.data
            size[0] = self.size
            max_records[0] = 0
        except BaseException as exc:  # noqa: BLE001  (nothing may raise into CUPTI)
            buffer[0] = None
            size[0] = 0
            self.on_error(exc)

    def _completed(self, ctx: Any, stream: int, buffer: int | None, size: int, valid: int) -> None:
        arr = self._pool.get(buffer or 0)
        if arr is None:
            return
        try:
            if valid:
                self.on_buffer(arr, valid, self._next_record(buffer or 0, valid))
        except BaseException as exc:  # noqa: BLE001
            self.on_error(exc)
        finally:
            if valid and buffer:
                ctypes.memset(buffer, 0, valid)  # a foreign call: other threads run meanwhile
            self._free.append(arr)

    def _next_record(self, base: int, valid: int) -> NextRecord:
        it = self._iter
        rec = ctypes.c_void_p()
        ref = ctypes.pointer(rec)

        def next_record(off: int | None) -> int:
            rec.value = None if off is None else base + off
            if it(base, valid, ref) != CUPTI_SUCCESS or rec.value is None:
                return -1
            return int(rec.value) - base

        return next_record
