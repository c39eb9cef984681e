"""CUPTI's memory records (CUPTI_ACTIVITY_KIND_MEMORY2 / MEMORY_POOL) read from raw buffers into memory_event.

The records are packed here byte by byte with ``struct``, as ``cupti_activity.h`` lays out
``CUpti_ActivityMemory4`` (CUDA 13, 128 bytes), ``CUpti_ActivityMemory3`` (CUDA 12, 120 bytes) and
``CUpti_ActivityMemoryPool3`` (80 bytes), independently of the numpy layouts the reader uses.
"""

from __future__ import annotations

import ctypes
import importlib.util
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_cupti import FakeBuffer, RawLayout

from gpuscope.analysis.memory.summaries import memory_sum
from gpuscope.capture.cupti.activity import CuptiCollector, _kinds, struct_dtypes
from gpuscope.capture.cupti.buffers import StrideTable, struct_versions, walk
from gpuscope.spool import SpoolWriter
from gpuscope.trace.report import Report
from gpuscope.trace.writer import ReportWriter

cupti = pytest.importorskip("cupti.cupti")
T0 = 1_700_000_000_000_000_000
MIB = 1 << 20
INVALID = 0xFFFFFFFF
KIND_MEMORY2, KIND_POOL = 49, 50
ALLOC, RELEASE = 1, 2
PAGEABLE, PINNED, DEVICE = 1, 2, 3
_LIBRARY = ctypes.create_string_buffer(b"libcupy_backends.so")


def _memory(version: int, op: int, address: int, nbytes: int, t: int, *, device: int = 0, kind: int = DEVICE,
            stream: int = INVALID, is_async: int = 0, pool_size: int = 0, correlation: int = 1) -> bytes:
    """One CUpti_ActivityMemory3/4 record: kind, memoryOperationType, memoryKind, correlationId, address, bytes,
    timestamp, PC, processId, deviceId, contextId, streamId, name, isAsync, pad1, memoryPoolConfig
    {memoryPoolType, pad2, address, releaseThreshold, pool.size, utilizedSize}[, source]."""
    rec = struct.pack("<iiiIQQQQIIIIqII", KIND_MEMORY2, op, kind, correlation, address, nbytes, T0 + t, 0xABC, 4242,
                      device, 1, stream, 0, is_async, 0)
    rec += struct.pack("<iIQQQQ", 1 if is_async else 0, 0, 0x5000 if is_async else 0, 0, pool_size, nbytes)
    if version == 4:
        rec += struct.pack("<q", ctypes.addressof(_LIBRARY))
    assert len(rec) == {3: 120, 4: 128}[version]
    return rec


def _pool(op: int, size: int, t: int, device: int = 0) -> bytes:
    """One CUpti_ActivityMemoryPool3 record: kind, memoryPoolOperationType, memoryPoolType, correlationId, processId,
    deviceId, minBytesToKeep, address, size, releaseThreshold, timestamp, utilizedSize, isManagedPool, pad2[7]."""
    rec = struct.pack("<iiiIIIQQQQQQB7x", KIND_POOL, op, 1, 0, 4242, device, 0, 0x5000, size, 0, T0 + t, 0, 0)
    assert len(rec) == 80
    return rec


def _program(version: int) -> list[bytes]:
    """What a program did: a 1 GiB cudaMalloc and its free, a 256 MiB cudaMallocAsync from a pool, a free of
    memory allocated before recording, 2 MiB of pinned host memory, on device 0; 4 MiB on device 1."""
    gib = 1024 * MIB
    m = lambda *a, **k: _memory(version, *a, **k)
    return [
        m(ALLOC, 0x7F0000000000, gib, 100),
        _pool(1, 512 * MIB, 150),
        m(ALLOC, 0x7F0040000000, 256 * MIB, 200, stream=13, is_async=1, pool_size=512 * MIB),
        m(RELEASE, 0x7F0000000000, gib, 300),
        m(RELEASE, 0x7E0000000000, 64 * MIB, 350),  # allocated before recording started
        m(ALLOC, 0x200000000, 2 * MIB, 360, kind=PINNED),
        m(RELEASE, 0x7F0040000000, 256 * MIB, 400, stream=13, is_async=1, pool_size=512 * MIB),
        _pool(3, 256 * MIB, 450),
        m(ALLOC, 0x7F1000000000, 4 * MIB, 500, device=1),
        m(RELEASE, 0x7F1000000000, 4 * MIB, 600, device=1),
    ]


def _layout(records: list[bytes]) -> RawLayout:
    buf = FakeBuffer(cupti)
    for rec in records:
        buf.parts.append(("raw", np.frombuffer(rec, dtype=np.dtype(f"V{len(rec)}"))))
    return RawLayout(buf)


def _report(tmp_path: Path, records: list[bytes]) -> tuple[Report, CuptiCollector]:
    spool = tmp_path / "spool"
    spool.mkdir()
    diags: list[tuple[str, str]] = []
    c = CuptiCollector(SpoolWriter(str(spool), pid=99), {"cuda", "memory"}, lambda lvl, m: diags.append((lvl, m)))
    c.bind(cupti, np)
    lay = _layout(records)
    c._on_raw_buffer(lay.raw, lay.valid, lay.next_record)
    assert diags == [] and c.failed_records == 0
    out = tmp_path / "r.gpuscope"
    w = ReportWriter(out)
    w.con.execute("INSERT INTO process (pid, ppid, start_ns, clock) VALUES (99, 1, ?, 'cupti')", [T0])
    w.ingest(str(spool), final=True)
    w.close()
    return Report.open(out), c


@pytest.mark.parametrize("version", [3, 4])
def test_memory_records_of_either_version_become_allocations_frees_and_totals(tmp_path: Path, version: int) -> None:
    report, c = _report(tmp_path, _program(version))
    assert c.records == 10
    with report as r:
        rows = r.sql("""SELECT ts_ns - ?, device_id, kind, bytes, allocated_bytes, stream_id, source
                        FROM memory_event ORDER BY ts_ns""", [T0])
        counters = r.sql("SELECT name, max(value) FROM host_counter GROUP BY name ORDER BY name")
    gib = 1024 * MIB
    assert rows == [
        (100, 0, "alloc", gib, gib, None, "cuda"),
        (150, 0, "pool_create", 512 * MIB, None, None, "cuda"),
        (200, 0, "alloc", 256 * MIB, gib + 256 * MIB, 13, "cuda"),
        (300, 0, "free", gib, 256 * MIB, None, "cuda"),
        (350, 0, "free", 64 * MIB, 256 * MIB, None, "cuda"),  # never seen allocated: counts nothing
        (360, -1, "alloc", 2 * MIB, 2 * MIB, None, "cuda"),  # pinned host memory
        (400, 0, "free", 256 * MIB, 0, 13, "cuda"),
        (450, 0, "pool_trim", 256 * MIB, None, None, "cuda"),
        (500, 1, "alloc", 4 * MIB, 4 * MIB, None, "cuda"),
        (600, 1, "free", 4 * MIB, 0, None, "cuda"),
    ]
    assert counters == [("cpu.cuda_allocated_bytes", 2.0 * MIB), ("gpu0.cuda_allocated_bytes", float(gib + 256 * MIB)),
                        ("gpu1.cuda_allocated_bytes", 4.0 * MIB)]


def test_memory_sum_shows_the_cuda_level_peak_per_device(tmp_path: Path) -> None:
    report, _ = _report(tmp_path, _program(4))
    with report as r:
        table = memory_sum(r)
    peaks = {(x["Device"], x["Source"]): (x["Bytes"], x["Time"]) for x in table.records()
             if x["Section"] == "peak allocated"}
    assert peaks == {("gpu0", "cuda"): (1280 * MIB, 200), ("gpu1", "cuda"): (4 * MIB, 500),
                     ("cpu", "cuda"): (2 * MIB, 360)}
    live = [(x["Device"], x["Bytes"]) for x in table.records() if x["Section"] == "live at peak"]
    assert ("gpu0", 1024 * MIB) in live and ("gpu0", 256 * MIB) in live
    assert any("Source cuda" in n for n in table.notes)


def test_the_walk_tells_the_versions_apart_by_size() -> None:
    for version, name in ((3, "ActivityMemory3"), (4, "ActivityMemory4")):
        strides = StrideTable(struct_versions(cupti, struct_dtypes(cupti)))
        lay = _layout(_program(version))
        runs = walk(lay.raw, lay.valid, strides, lay.next_record)
        assert strides.struct[KIND_MEMORY2] == name and strides.size[KIND_MEMORY2] == {3: 120, 4: 128}[version]
        assert strides.struct[KIND_POOL] == "ActivityMemoryPool3"
        assert sum(n for _, _, n, _ in runs) == 10


def test_the_library_that_asked_is_resolved_in_the_collector(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    c = CuptiCollector(SpoolWriter(str(spool), pid=99), {"cuda", "memory"}, lambda *a: None)
    c.bind(cupti, np)
    symbols: dict[tuple[str, int], int] = {}
    recs = np.frombuffer(_memory(4, ALLOC, 1, 1, 1), dtype=struct_dtypes(cupti)["activitymemory4"])
    c._resolve_strings(recs["source"], symbols)
    assert list(symbols) == [("ptr", ctypes.addressof(_LIBRARY))]


def test_memory_kinds_are_enabled_with_memory_and_cuda_and_stay_on_outside_windows() -> None:
    def labels(trace: set[str]) -> list[str]:
        return [label for label, _ in _kinds(cupti, trace)]

    assert "memory" in labels({"cuda", "memory"}) and "memory-pool" in labels({"cuda", "memory"})
    assert "memory" not in labels({"cuda"}) and labels({"memory"}) == []
    from gpuscope.capture.cupti.activity import ALWAYS_ON

    assert {"memory", "memory-pool"} <= set(ALWAYS_ON)




def _device_check() -> Any:
    path = Path(__file__).resolve().parents[1] / "device" / "check_memory_cupti.py"
    spec = importlib.util.spec_from_file_location("check_memory_cupti", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _truth_and_records() -> tuple[dict[str, Any], list[bytes]]:
    """The device check's program as CUPTI would record it (with PyTorch's segments before and after)."""
    a, b, c, pool, host, seg1, seg2 = (0x7F0000000000, 0x7F1000000000, 0x7F2000000000, 0x7F3000000000, 0x200000000,
                                       0x7F4000000000, 0x7F1000000000)  # the 256 MiB segment reuses b's address
    events = [("alloc", a, 64 * MIB, 0), ("alloc", b, 1024 * MIB, 0), ("alloc", c, 3 * MIB + 512, 0), ("free", b, 0, 0),
              ("alloc", pool, 32 * MIB, 0), ("free", pool, 0, 0), ("alloc", host, 8 * MIB, -1), ("free", host, 0, -1)]
    truth_events = [{"op": op, "address": ad, **({"bytes": n, "device": d} if op == "alloc" else {})}
                    for op, ad, n, d in events]
    records = [_memory(4, ALLOC, seg1, 2 * MIB, 10)]
    sizes = {ad: n for op, ad, n, _ in events if op == "alloc"}
    for t, (op, ad, n, d) in enumerate(events, start=1):
        records.append(_memory(4, ALLOC if op == "alloc" else RELEASE, ad, sizes[ad], 100 * t,
                               kind=PINNED if d < 0 else DEVICE))
    records += [_memory(4, ALLOC, seg2, 256 * MIB, 1000), _memory(4, RELEASE, a, 64 * MIB, 1100),
                _memory(4, RELEASE, c, 3 * MIB + 512, 1200)]
    truth_events += [{"op": "free", "address": a}, {"op": "free", "address": c}]
    truth = {"events": truth_events, "segments": [{"address": seg1, "bytes": 2 * MIB},
                                                  {"address": seg2, "bytes": 256 * MIB}],
             "held_at_once": 1091 * MIB + 512, "max_reserved": 258 * MIB}
    return truth, records


def test_the_device_check_passes_on_a_faithful_recording_and_fails_on_a_lost_free(tmp_path: Path) -> None:
    check = _device_check().check
    truth, records = _truth_and_records()
    (tmp_path / "good").mkdir()
    report, _ = _report(tmp_path / "good", records)
    report.close()
    verdict = check(tmp_path / "good" / "r.gpuscope", truth)
    assert verdict["ok"], verdict
    assert verdict["info"]["peak"]["recorded"] == 1093 * MIB + 512  # with PyTorch's first 2 MiB segment
    lost = [r for r in records if struct.unpack_from("<i", r, 4)[0] != RELEASE or
            struct.unpack_from("<Q", r, 16)[0] != 0x7F1000000000]  # b's free never came
    (tmp_path / "lost").mkdir()
    report, _ = _report(tmp_path / "lost", lost)
    report.close()
    verdict = check(tmp_path / "lost" / "r.gpuscope", truth)
    assert not verdict["ok"] and not verdict["checks"]["every_device_allocation_and_free_recorded_in_order"]
