"""An Nsight Systems SQLite export (``nsys export --type sqlite``) as a gpuscope report.

Tables read (each where present; a column an older or trimmed export lacks reads as NULL):
``CUPTI_ACTIVITY_KIND_KERNEL`` (names from ``StringIds``, launch configuration), ``_MEMCPY``,
``_MEMSET``, ``_RUNTIME`` (CUDA runtime and driver calls; host waits among them also as
``sync_site``), ``_SYNCHRONIZATION``, ``NVTX_EVENTS`` (push/pop and start/end ranges and marks, text
inline or registered in ``StringIds``, domains by name), ``PROCESSES`` and ``TARGET_INFO_GPU``.
Nsight Systems numbers processes and threads globally: ``globalPid = ... | pid << 24`` and
``globalTid = globalPid | tid``. Rows are read from SQLite in batches, so memory stays bounded.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import GpuscopeError
from .kineto import SYNC_APIS
from .sink import ReportSink

BATCH = 100_000
# CUPTI enum values as Nsight Systems' names (docs/report-format.md keeps these spellings).
COPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
             9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
            6: "Managed Static", 7: "Unknown"}
SYNC_TYPE = {1: "EventSynchronize", 2: "StreamWaitEvent", 3: "StreamSynchronize", 4: "ContextSynchronize"}
NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN = 34, 59, 60, 75
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def _pid(global_id: int | None) -> int | None:
    return None if global_id is None else (int(global_id) >> 24) & 0xFFFFFF


def _tid(global_tid: int | None) -> int | None:
    return None if global_tid is None else int(global_tid) & 0xFFFFFF


class NsysExport:
    """An opened export: which tables and columns it has, and its strings."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # a URI of the whole path, quoted (a name may hold '#', '?' or '%'), opened read-only: nothing is created
        uri = "file:" + urllib.parse.quote(str(Path(path).resolve())) + "?mode=ro"
        try:
            self.con = sqlite3.connect(uri, uri=True)
            names = [r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        except sqlite3.DatabaseError as exc:
            raise GpuscopeError(f"{path}: not a readable SQLite database ({exc})") from None
        self.tables = set(names)
        if "StringIds" not in self.tables or not any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in names):
            raise GpuscopeError(f"{path}: not an Nsight Systems export (an SQLite database without StringIds and "
                                "CUPTI_ACTIVITY_KIND_* tables; write one with nsys export --type sqlite)")
        self.strings = dict(self.con.execute("SELECT id, value FROM StringIds"))

    def columns(self, table: str) -> set[str]:
        """Return the column names of ``table``."""
        return {r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}

    def rows(self, table: str, wanted: list[str]) -> Iterator[tuple[Any, ...]]:
        """Yield ``wanted`` columns of every row of ``table`` (NULL for a column it lacks), in batches."""
        if table not in self.tables:
            return
        have = self.columns(table)
        cols = ", ".join(f'"{c}"' if c in have else "NULL" for c in wanted)
        cur = self.con.execute(f'SELECT {cols} FROM "{table}"')
        while True:
            batch = cur.fetchmany(BATCH)
            if not batch:
                return
            yield from batch

    def check_times(self) -> None:
        """Raise GpuscopeError naming the first table and column of GPU work whose times gpuscope
        cannot read: a ``start`` or ``end`` column missing (renamed), or a row where it is not an
        integer (NULL, text)."""
        for table in GPU_TABLES:
            if table not in self.tables:
                continue
            have = self.columns(table)
            for col in ("start", "end"):
                if col not in have:
                    raise GpuscopeError(f"{self.path}: {table} has no column {col} (the time of each GPU "
                                        "operation); not an export gpuscope can import")
                bad = self.con.execute(f'SELECT count(*) FROM "{table}" WHERE typeof("{col}") <> \'integer\'').fetchone()[0]
                if bad:
                    raise GpuscopeError(f"{self.path}: {table}.{col} is NULL or not an integer in {bad:,} "
                                        f"row{'s' * (bad != 1)}; not an export gpuscope can import")

    def count(self, table: str) -> int:
        """Return the rows of ``table`` (0 when it is absent)."""
        return int(self.con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]) if table in self.tables else 0


class NsysImporter:
    """Maps the tables of one export into a :class:`ReportSink`."""

    def __init__(self, export: NsysExport, sink: ReportSink) -> None:
        self.x = export
        self.sink = sink
        self.ids: dict[int, int] = {}  # StringIds id -> report string id
        self.configs: dict[tuple[Any, ...], int] = {}
        self.pids: Counter[int] = Counter()
        self.first: int | None = None
        self.last = 0

    def _string(self, sid: int | None, fallback: str = "") -> int:
        if sid is None:
            return self.sink.intern(fallback)
        got = self.ids.get(sid)
        if got is None:
            got = self.ids[sid] = self.sink.intern(self.x.strings.get(sid, fallback or f"(string {sid})"))
        return got

    def _seen(self, start: int, end: int | None, pid: int | None) -> None:
        if self.first is None or start < self.first:
            self.first = start
        if end is not None and end > self.last:
            self.last = end
        if pid is not None:
            self.pids[pid] += 1

    def kernels(self) -> None:
        cols = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName",
                "shortName", "mangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "clusterX",
                "clusterY", "clusterZ", "registersPerThread", "staticSharedMemory", "dynamicSharedMemory",
                "localMemoryPerThread", "localMemoryTotal", "sharedMemoryExecuted", "launchType", "graphId",
                "graphNodeId"]
        for row in self.x.rows("CUPTI_ACTIVITY_KIND_KERNEL", cols):
            start, end, dev, ctx, stream, corr, gpid, demangled, short, mangled = row[:10]
            pid = _pid(gpid)
            self._seen(start, end, pid)
            name = demangled if demangled is not None else short
            key = (name, mangled, *row[10:26])
            cid = self.configs.get(key)
            if cid is None:
                cid = self.configs[key] = len(self.configs)
                nid = self._string(name)
                self.sink.add("kernel_config", (cid, nid, self._string(mangled) if mangled is not None else nid,
                                                *row[10:26]))
            self.sink.add("kernel", (start, end, None, None, pid, dev, ctx, stream, corr, cid, row[26], row[27]))

    def copies(self) -> None:
        cols = ["start", "end", "globalPid", "deviceId", "contextId", "streamId", "correlationId", "copyKind",
                "srcKind", "dstKind", "bytes", "graphNodeId"]
        for s, e, gpid, dev, ctx, stream, corr, kind, src, dst, nbytes, node in self.x.rows(
                "CUPTI_ACTIVITY_KIND_MEMCPY", cols):
            pid = _pid(gpid)
            self._seen(s, e, pid)
            self.sink.add("memcpy", (s, e, pid, dev, ctx, stream, corr, COPY_KIND.get(kind), MEM_KIND.get(src),
                                     MEM_KIND.get(dst), nbytes, None, None, node))
        cols = ["start", "end", "globalPid", "deviceId", "contextId", "streamId", "correlationId", "memKind", "bytes",
                "value", "graphNodeId"]
        for s, e, gpid, dev, ctx, stream, corr, kind, nbytes, value, node in self.x.rows(
                "CUPTI_ACTIVITY_KIND_MEMSET", cols):
            pid = _pid(gpid)
            self._seen(s, e, pid)
            self.sink.add("memset", (s, e, pid, dev, ctx, stream, corr, MEM_KIND.get(kind), nbytes, value, None,
                                     None, node))

    def api_calls(self) -> None:
        for s, e, gtid, corr, name_id, ret in self.x.rows(
                "CUPTI_ACTIVITY_KIND_RUNTIME", ["start", "end", "globalTid", "correlationId", "nameId", "returnValue"]):
            pid, tid = _pid(gtid), _tid(gtid)
            self._seen(s, e, pid)
            name = self.x.strings.get(name_id, "")
            base = name.split("_v", 1)[0]  # cudaLaunchKernel_v7000 -> cudaLaunchKernel
            domain = "driver" if base.startswith("cu") and not base.startswith("cuda") else "runtime"
            sid = self.sink.intern(base)
            self.sink.add("api_call", (s, e, pid, tid, domain, None, sid, corr, ret))
            if base in SYNC_APIS:
                self.sink.add("sync_site", (s, e, pid, tid, sid, corr, 0))
        cols = ["start", "end", "globalPid", "contextId", "streamId", "eventId", "syncType", "correlationId"]
        for s, e, gpid, ctx, stream, event, kind, corr in self.x.rows("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", cols):
            self.sink.add("sync", (s, e, _pid(gpid), ctx, stream, event, SYNC_TYPE.get(kind), corr, None))

    def nvtx(self) -> None:
        cols = ["start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid", "textId", "domainId"]
        domains: dict[int, int] = {}
        if "NVTX_EVENTS" in self.x.tables:  # domain names first: a range may come before its domain's row
            for domain, text, text_id in self.x.con.execute(
                    f"SELECT domainId, text, textId FROM NVTX_EVENTS WHERE eventType = {NVTX_DOMAIN}"):
                if domain is not None:
                    domains[domain] = self.sink.intern(text or self.x.strings.get(text_id, ""))
        rows = self.x.rows("NVTX_EVENTS", cols)
        n = 0
        for s, e, kind, rid, category, color, text, gtid, text_id, domain in rows:
            if kind not in (NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END):
                continue
            n += 1
            name = text if text is not None else self.x.strings.get(text_id, "") if text_id is not None else ""
            mark = kind == NVTX_MARK
            self.sink.add("nvtx_range", (s, s if mark else e, _pid(gtid), _tid(gtid), rid if rid is not None else n,
                                         domains.get(domain, 0) if domain else 0, self.sink.intern(name),
                                         "mark" if mark else "range", "nvtx",
                                         None if category is None else str(category),
                                         None if color is None else f"#{int(color) & 0xFFFFFF:06x}"))

    def finish(self) -> dict[str, Any]:
        """Write processes and devices, give GPU rows without a process the main one; return ``meta``."""
        if not any(self.x.count(t) for t in GPU_TABLES):
            raise GpuscopeError(f"{self.x.path}: no GPU events (kernels, copies, sets) in this export; record with "
                                "nsys profile --trace cuda")
        main = self.pids.most_common(1)[0][0] if self.pids else 0
        for table in ("kernel", "memcpy", "memset", "sync"):
            self.sink.execute(f"UPDATE {table} SET pid = ? WHERE pid IS NULL", [main])
        names = dict((int(p), n) for p, n in self.x.rows("PROCESSES", ["pid", "name"]) if p is not None)
        for pid in sorted(self.pids):
            self.sink.add("process", (pid, None, names.get(pid), None, None, self.first, self.last, "cupti", 0))
        gpu_cols = ["id", "name", "computeMajor", "computeMinor", "smCount", "totalMemory", "memoryBandwidth",
                    "clockRate", "l2CacheSize", "maxThreadsPerBlock", "maxShmemPerBlock", "maxShmemPerMultiprocessor",
                    "maxRegistersPerSm", "maxWarpsPerSm", "maxBlocksPerSm", "threadsPerWarp", "asyncEngines"]
        for (dev, name, major, minor, sms, mem, bw, clock, l2, tpb, smem_b, smem_sm, regs, warps, blocks, tpw,
             engines) in self.x.rows("TARGET_INFO_GPU", gpu_cols):
            cc = f"{major}.{minor}" if major is not None else None
            self.sink.add("device", (main, dev, name, cc, sms, mem, bw // 1000 if bw else None,
                                     clock // 1000 if clock else None, l2, tpb, smem_b, smem_sm, regs, warps, blocks,
                                     tpw, engines))
        version = dict(self.x.rows("META_DATA_EXPORT", ["name", "value"])).get("EXPORT_PRODUCT_VERSION")
        lacks = {
            "torch": "PyTorch module, optimizer and step ranges: an Nsight Systems export has none",
            "torch_ops": "PyTorch operators with their shapes (op_sum, FLOPs, roofline): an Nsight Systems export "
                         "has none",
            "cpu": "Python stack samples (cpu_hotspots): not imported from Nsight Systems",
            "host": "host and process CPU counters: not imported from Nsight Systems",
        }
        lacks["torch-ops"] = lacks["torch_ops"]
        if not self.x.count("CUPTI_ACTIVITY_KIND_RUNTIME"):
            lacks["cuda_api"] = "CUDA API calls: the export has none (nsys profile --trace cuda)"
        if not self.x.count("NVTX_EVENTS"):
            lacks["nvtx"] = "NVTX ranges: the export has none (nsys profile --trace nvtx)"
        source = {"format": "nsys-sqlite", "file": self.x.path.name, "nsys_version": version,
                  "tables": {t: self.x.count(t) for t in sorted(self.x.tables) if t.startswith(("CUPTI_", "NVTX_"))}}
        meta: dict[str, Any] = {"imported_from": source, "not_recorded": lacks, "trace": ["cuda", "cuda-api", "nvtx"]}
        if self.first is not None:
            meta["wall_ns"] = self.last - self.first
        return meta


def import_nsys(path: Path, sink: ReportSink) -> dict[str, Any]:
    """Import the Nsight Systems SQLite export at ``path`` into ``sink``; return the report's ``meta``."""
    export = NsysExport(path)
    try:
        export.check_times()
        importer = NsysImporter(export, sink)
        importer.kernels()
        importer.copies()
        importer.api_calls()
        importer.nvtx()
        return importer.finish()
    except sqlite3.DatabaseError as exc:
        raise GpuscopeError(f"{path}: damaged Nsight Systems export ({exc})") from None
    finally:
        export.con.close()
