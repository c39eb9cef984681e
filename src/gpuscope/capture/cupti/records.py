"""CUPTI's activity records out of its buffers into the spool (for :class:`.activity.CuptiCollector`).

Records are grouped by struct type and leave the process as packed CUPTI structs; the few distinct
string pointers (kernel names, domains) and API callback ids are resolved to interned strings on
the way. Taken from cupti-python's per-record objects, only each object's address is read and the
records are copied out in blocks; taken raw, the buffer is read in place. Runs on CUPTI's thread.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

from ...spool import SpoolWriter

# Records further apart than this are not in the same buffer (the largest CUPTI record is < 1 KiB).
MAX_RECORD_GAP = 4096
# Fields of CUPTI structs that hold ``const char *`` to strings owned by CUPTI.
STRING_FIELDS = ("name", "domain", "source")


class RecordShipping:
    """Packing and shipping of activity records: the half of the collector that handles records."""

    spool: SpoolWriter
    diag: Callable[[str, str], None]
    records: int
    buffers: int
    copied_buffers: int
    failed_records: int
    _np: Any
    _cupti: Any
    _dtypes: dict[str, Any]
    _class_dtype: dict[type, Any]
    _api_domains: dict[int, str]
    _api_names: dict[tuple[str, int], int]
    _sent_dtypes: set[str]
    _unsupported: set[str]

    def _dtype_of(self, cls: type) -> Any:
        dt = self._class_dtype.get(cls)
        if dt is None and cls not in self._class_dtype:
            dt = self._dtypes.get(cls.__name__.lower())
            self._class_dtype[cls] = dt
        return dt

    def _ship(self, activities: list[Any]) -> None:
        np = self._np
        ptrs = np.array([a.ptr for a in activities], dtype=np.int64)
        raw, offsets = self._copy_blocks(activities, ptrs)
        kinds = _read_i32(np, raw, offsets)
        blocks = []
        for kind in np.unique(kinds):
            idx = np.flatnonzero(kinds == kind)
            cls = type(activities[int(idx[0])])
            dt = self._dtype_of(cls)
            if dt is None:
                self._unsupported_record(cls.__name__, len(idx))
                continue
            blocks.append((cls.__name__, dt, [_gather(np, raw, offsets[idx], dt.itemsize)]))
        self._ship_blocks(blocks)

    def _ship_blocks(self, blocks: list[tuple[str, Any, list[Any]]]) -> None:
        """Write one chunk of packed records: (struct class name, dtype, byte arrays) per struct type.

        The bytes may be views of CUPTI's buffer: the chunk is written before this returns. They
        are written one after the other, not joined first (that copy would hold the GIL).
        """
        np = self._np
        records: dict[str, Any] = {}
        dtypes: dict[str, Any] = {}
        symbols: dict[tuple[str, int], int] = {}
        shipped = 0
        for name, dt, parts in blocks:
            recs = [p.view(dt) for p in parts]
            kind = int(recs[0]["kind"][0])
            for f in STRING_FIELDS:
                if f in dt.names:
                    self._resolve_strings(np.concatenate([r[f] for r in recs]), symbols)
            if kind in self._api_domains:
                self._resolve_api_names(self._api_domains[kind], np.concatenate([r["cbid"] for r in recs]), symbols)
            records[name] = parts
            if name not in self._sent_dtypes:
                self._sent_dtypes.add(name)
                dtypes[name] = dt
            shipped += sum(len(r) for r in recs)
        self.spool.write(records=records, dtypes=dtypes, symbols=symbols)
        self.records += shipped
        self.buffers += 1

    def _copy_blocks(self, activities: list[Any], ptrs: Any) -> tuple[Any, Any]:
        """Copy the records out of CUPTI's memory; return the bytes and each record's offset.

        Records normally sit back to back in one buffer, copied in one go; a record that lives
        elsewhere (CUPTI keeps some apart) starts a block of its own.
        """
        np = self._np
        order = np.argsort(ptrs, kind="stable")
        sorted_ptrs = ptrs[order]
        cuts = np.flatnonzero(np.diff(sorted_ptrs) > MAX_RECORD_GAP) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [len(sorted_ptrs)]))
        parts, offsets, pos = [], np.empty(len(ptrs), dtype=np.int64), 0
        for s, e in zip(starts.tolist(), ends.tolist()):
            first = int(sorted_ptrs[s])
            last_dt = self._dtype_of(type(activities[int(order[e - 1])]))
            tail = last_dt.itemsize if last_dt is not None else 4  # 4: just the kind field
            size = int(sorted_ptrs[e - 1]) - first + tail
            parts.append((first, size))
            offsets[order[s:e]] = sorted_ptrs[s:e] - first + pos
            pos += size
        if len(parts) == 1:
            # Read CUPTI's buffer in place: it stays valid until this callback returns.
            first, size = parts[0]
            return np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(first)), offsets
        self.copied_buffers += 1
        blob = b"".join(ctypes.string_at(first, size) for first, size in parts)
        return np.frombuffer(blob, dtype=np.uint8), offsets

    def _resolve_strings(self, values: Any, symbols: dict[tuple[str, int], int]) -> None:
        for p in self._np.unique(values):
            key = ("ptr", int(p))
            if key[1] and key not in symbols:
                text = ctypes.string_at(key[1]).decode("utf-8", "replace")
                symbols[key] = self.spool.intern(text)

    def _resolve_api_names(self, domain: str, cbids: Any, symbols: dict[tuple[str, int], int]) -> None:
        for cbid in self._np.unique(cbids):
            key = (domain, int(cbid))
            sid = self._api_names.get(key)
            if sid is None:
                sid = self.spool.intern(_api_name(self._cupti, domain, key[1]))
                self._api_names[key] = sid
            symbols[key] = sid

    def _unsupported_record(self, name: str, count: int) -> None:
        self.failed_records += count
        if name not in self._unsupported:
            self._unsupported.add(name)
            self.diag("warning", f"CUPTI records of {name} are not read by gpuscope with this cupti-python; skipped")


def _api_name(cupti: Any, domain: str, cbid: int) -> str:
    """Return the API function's name for a CUPTI callback id (``cudaLaunchKernel``)."""
    enum = cupti.runtime_api_trace_cbid if domain == "runtime" else cupti.driver_api_trace_cbid
    try:
        name = enum(cbid).name
    except ValueError:
        return f"{domain}_cbid_{cbid}"
    base, sep, version = name.rpartition("_v")
    return base if sep and version.isdigit() else name


def _gather(np: Any, raw: Any, offsets: Any, size: int) -> Any:
    """Return the ``size``-byte records at ``offsets`` of ``raw``, packed back to back.

    Records of one kind mostly follow each other at a stride of their size; each such run is
    one slice, so the cost grows with the number of runs, not of records.
    """
    first = int(offsets[0])
    breaks = np.flatnonzero(np.diff(offsets) != size) + 1
    if not len(breaks):
        return raw[first : first + size * len(offsets)]  # already packed: no copy
    starts = np.concatenate(([0], breaks)).tolist()
    ends = np.concatenate((breaks, [len(offsets)])).tolist()
    if len(starts) > len(offsets) // 4:  # scattered: one vectorized gather
        return raw[(offsets[:, None] + np.arange(size)).reshape(-1)]
    return np.concatenate([raw[int(offsets[s]) : int(offsets[s]) + size * (e - s)] for s, e in zip(starts, ends)])


def _read_i32(np: Any, raw: Any, offsets: Any) -> Any:
    """Return the int32 at each offset of ``raw`` (the ``kind`` field that starts every record)."""
    if not (offsets & 3).any():  # CUPTI aligns records, so this is the usual case
        return np.frombuffer(raw.data, dtype="<i4", count=len(raw) // 4)[offsets >> 2]
    idx = offsets[:, None] + np.arange(4)
    return raw[idx].reshape(-1).view("<i4")
