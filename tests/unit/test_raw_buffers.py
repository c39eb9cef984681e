"""CUPTI buffers read in raw (capture/cupti/buffers.py): the walk by runs against CUPTI's iterator,
struct versions told by record size, the buffer pool, and the records' way into the report."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fake_cupti import FakeBuffer, RawLayout
from gpuscope.capture.cupti.buffers import RawBuffers, StrideTable, run_offsets, struct_versions, walk
from gpuscope.capture.cupti.activity import CuptiCollector, struct_dtypes
from gpuscope.spool import SpoolWriter
from gpuscope.trace.report import Report
from gpuscope.trace.writer import ReportWriter

cupti = pytest.importorskip("cupti.cupti")
T0 = 1_700_000_000_000_000_000
KERNEL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"


def _strides() -> StrideTable:
    return StrideTable(struct_versions(cupti, struct_dtypes(cupti)))


def _kernels(buf: FakeBuffer, n: int, first: int = 0, struct: str = "ActivityKernel11") -> None:
    for i in range(first, first + n):
        buf.add(struct, kind=10, name=KERNEL, start=T0 + 1000 * i, end=T0 + 1000 * i + 500,
                queued=T0 + 1000 * i - 300, correlation_id=i + 1, stream_id=7, grid_x=i + 1)


def _mixed() -> FakeBuffer:
    buf = FakeBuffer(cupti)
    _kernels(buf, 50)
    buf.add("ActivityMemcpy6", kind=1, copy_kind=1, src_kind=1, dst_kind=3, bytes=4096,
            start=T0 + 60_000, end=T0 + 61_000, stream_id=7, correlation_id=100)
    _kernels(buf, 30, first=50)
    for i in range(3):
        buf.add("ActivityAPI", kind=5, cbid=211, start=T0 + i, end=T0 + i + 10, process_id=1,
                thread_id=2, correlation_id=200 + i)
    buf.add("ActivityMarker2", kind=12, flags_=1, timestamp=T0 + 5, id=1, name="mark")
    return buf


def test_the_walk_finds_every_record_and_asks_cuptis_iterator_once_per_run() -> None:
    lay = RawLayout(_mixed())
    runs = walk(lay.raw, lay.valid, _strides(), lay.next_record)
    assert run_offsets(runs) == lay.offsets
    assert [(k, n) for k, _, n, _ in runs] == [(10, 50), (1, 1), (10, 30), (5, 3), (12, 1)]
    assert lay.calls <= 2 * len(runs) + 1 < len(lay.offsets)


@pytest.mark.parametrize("filler", [bytes(4096), bytes([0xAB]) * 520])
def test_bytes_cupti_skipped_between_records_end_a_run(filler: bytes) -> None:
    # zeros (a zeroed buffer's unused part) or bytes that are no kind: CUPTI's iterator says
    # where the records go on
    buf = FakeBuffer(cupti)
    _kernels(buf, 20)
    lay = RawLayout(buf, gaps={9: filler})
    runs = walk(lay.raw, lay.valid, _strides(), lay.next_record)
    assert run_offsets(runs) == lay.offsets


def test_struct_versions_are_told_by_record_size() -> None:
    for struct in ("ActivityKernel11", "ActivityKernel13", "ActivityKernel9"):
        buf = FakeBuffer(cupti)
        _kernels(buf, 3, struct=struct)
        lay = RawLayout(buf)
        strides = _strides()
        runs = walk(lay.raw, lay.valid, strides, lay.next_record)
        assert strides.struct[10] == struct and run_offsets(runs) == lay.offsets
    one = FakeBuffer(cupti)  # a lone record: its size is what is left of the valid bytes
    _kernels(one, 1, struct="ActivityKernel12")
    lay = RawLayout(one)
    strides = _strides()
    walk(lay.raw, lay.valid, strides, lay.next_record)
    assert strides.struct[10] == "ActivityKernel12"


def _unknown(buf: FakeBuffer, kind: int, size: int) -> None:
    rec = np.zeros(1, dtype=np.dtype([("kind", "<u4"), ("rest", f"V{size - 4}")]))
    rec["kind"] = kind
    buf.parts.append(("Unknown", rec))


def _collector(tmp_path: Path, diags: list[tuple[str, str]]) -> tuple[CuptiCollector, Path]:
    spool = tmp_path / "spool"
    spool.mkdir()
    c = CuptiCollector(SpoolWriter(str(spool), pid=99), {"cuda"}, lambda lvl, m: diags.append((lvl, m)))
    c.bind(cupti, np)
    return c, spool


def _report(tmp_path: Path, spool: Path) -> Report:
    out = tmp_path / "r.gpuscope"
    w = ReportWriter(out)
    w.ingest(str(spool), final=True)
    w.close()
    return Report.open(out)


def test_raw_buffers_reach_the_report_and_unknown_kinds_are_counted(tmp_path: Path) -> None:
    buf = _mixed()
    _unknown(buf, 99, 48)  # a kind gpuscope does not read, between two kernel runs
    _kernels(buf, 5, first=80)
    diags: list[tuple[str, str]] = []
    c, spool = _collector(tmp_path, diags)
    c.verify_walk = True
    lay = RawLayout(buf)
    c._on_raw_buffer(lay.raw, lay.valid, lay.next_record)
    assert (c.records, c.failed_records) == (90, 1)
    assert (c.walk_checked, c.walk_mismatches) == (91, 0)
    assert len(diags) == 1 and "kind 99" in diags[0][1]
    with _report(tmp_path, spool) as r:
        k = r.kernels().sort_values("start_ns")
        assert list(k["grid_x"]) == list(range(1, 86))
        assert (k["start_ns"] - k["queued_ns"] == 300).all()
        assert set(k["mangled_name"]) == {KERNEL}
        assert r.sql("SELECT count(*), sum(bytes) FROM memcpy")[0] == (1, 4096)


def test_raw_and_per_object_paths_give_the_same_report(tmp_path: Path) -> None:
    tables = []
    for path in ("raw", "objects"):
        d = tmp_path / path
        d.mkdir()
        c, spool = _collector(d, [])
        if path == "raw":
            lay = RawLayout(_mixed())
            c._on_raw_buffer(lay.raw, lay.valid, lay.next_record)
        else:
            buf = _mixed()  # owns the memory the objects point into
            c._on_complete(buf.activities())
        with _report(d, spool) as r:
            tables.append((r.kernels().drop(columns=["pid"]).sort_values("start_ns").to_dict("list"),
                           r.memcpys().drop(columns=["pid"]).to_dict("list")))
    for a, b in zip(tables[0], tables[1]):
        assert a.keys() == b.keys()
        for col in a:
            assert a[col] == b[col], col


def test_the_buffer_pool_hands_out_zeroed_buffers_and_survives_a_failing_reader() -> None:
    lay = RawLayout(_mixed())
    seen: list[list[int]] = []
    errors: list[BaseException] = []
    strides = _strides()

    def on_buffer(raw: np.ndarray, valid: int, next_record: Any) -> None:
        seen.append(run_offsets(walk(raw, valid, strides, next_record)))
        if len(seen) == 2:
            raise ValueError("reader failed")

    rb = RawBuffers(None, lay.iterate, 1 << 16, on_buffer, errors.append)
    addrs = []
    for _ in range(3):
        ptr, size, maxrec = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t(5)
        rb._requested(ctypes.pointer(ptr), ctypes.pointer(size), ctypes.pointer(maxrec))
        assert size.value == 1 << 16 and maxrec.value == 0
        buf = np.ctypeslib.as_array((ctypes.c_uint8 * size.value).from_address(ptr.value))
        assert not buf.any(), "CUPTI gets zeroed memory"
        buf[: lay.valid] = lay.raw[: lay.valid]
        rb._completed(None, 0, ptr.value, size.value, lay.valid)
        addrs.append(ptr.value)
    assert seen == [lay.offsets] * 3
    assert [str(e) for e in errors] == ["reader failed"]
    assert len(set(addrs)) == 1 and rb.buffers_allocated == 1, "one buffer, reused"
