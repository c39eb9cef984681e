"""CUPTI records through the whole path: in-process shipping, spool, decoding, the report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fake_cupti import FakeBuffer
from gpuscope.analysis.ops.cuda_summaries import cuda_api_sum, cuda_gpu_kern_sum, cuda_gpu_mem_time_sum
from gpuscope.capture.cupti.activity import CuptiCollector
from gpuscope.spool import SpoolWriter
from gpuscope.trace.report import Report
from gpuscope.trace.writer import ReportWriter

cupti = pytest.importorskip("cupti.cupti")

KERNEL_A = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
KERNEL_B = "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NNT"
T0 = 1_700_000_000_000_000_000


def _kernel(buf: FakeBuffer, name: str, start: int, dur: int, corr: int, grid: int = 4) -> None:
    buf.add("ActivityKernel11", kind=10, name=name, start=T0 + start, end=T0 + start + dur,
            queued=T0 + start - 500, submitted=T0 + start - 100, correlation_id=corr, device_id=0,
            context_id=1, stream_id=7, grid_x=grid, grid_y=1, grid_z=1, block_x=128, block_y=1,
            block_z=1, registers_per_thread=32, static_shared_memory=0, dynamic_shared_memory=1024)


def _collect(tmp_path: Path, buffers: list[FakeBuffer]) -> Report:
    spool = tmp_path / "spool"
    spool.mkdir()
    writer_spool = SpoolWriter(str(spool), pid=4242)
    diags: list[tuple[str, str]] = []
    collector = CuptiCollector(writer_spool, {"cuda", "cuda-api"}, lambda lvl, m: diags.append((lvl, m)))
    collector.bind(cupti, np)
    for buf in buffers:
        collector._on_complete(buf.activities())
    assert diags == []
    assert collector.failed_records == 0
    out = tmp_path / "r.gpuscope"
    w = ReportWriter(out)
    w.ingest(str(spool), final=True)
    w.close()
    assert not list(spool.iterdir()), "ingested chunks are deleted"
    return Report.open(out)


def test_kernels_memops_and_api_calls_reach_the_report(tmp_path: Path) -> None:
    b1 = FakeBuffer(cupti)
    _kernel(b1, KERNEL_A, 0, 1000, 1)
    _kernel(b1, KERNEL_B, 2000, 5000, 2, grid=132)
    b1.add("ActivityAPI", kind=5, cbid=211, start=T0 - 3000, end=T0 - 1000, process_id=4242,
           thread_id=77, correlation_id=1)
    b1.add("ActivityMemcpy6", kind=1, copy_kind=1, src_kind=1, dst_kind=3, bytes=4_000_000,
           start=T0 + 10_000, end=T0 + 12_000, flags_=0, stream_id=7, correlation_id=3)
    b1.add("ActivityMemset4", kind=2, bytes=1000, value=0, memory_kind=3, start=T0 + 13_000,
           end=T0 + 13_500, flags_=1, stream_id=7, correlation_id=4)
    b1.add("ActivitySynchronization2", kind=38, type=4, start=T0 + 14_000, end=T0 + 15_000,
           correlation_id=6, context_id=1, stream_id=0xFFFFFFFF, cuda_event_id=0xFFFFFFFF)
    b2 = FakeBuffer(cupti)  # a second buffer reuses the name; strings must still resolve
    _kernel(b2, KERNEL_A, 20_000, 3000, 5)
    with _collect(tmp_path, [b1, b2]) as report:
        kern = cuda_gpu_kern_sum(report)
        assert kern.column("Name") == [
            "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NNT",
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
        ]
        assert kern.column("Total Time") == [5000, 4000]
        assert kern.column("Instances") == [1, 2]
        assert kern.column("Med") == [5000, 2000]
        assert kern.column("StdDev")[1] == pytest.approx(1414.2, abs=0.1)  # sample stddev of 1000, 3000
        k = report.kernels()
        assert list(k["grid_x"]) == [4, 132, 4]
        assert list(k["queued_ns"] - k["start_ns"]) == [-500, -500, -500]
        assert set(k["mangled_name"]) == {KERNEL_A, KERNEL_B}
        assert report.sql("SELECT count(*) FROM kernel_config")[0][0] == 2
        api = cuda_api_sum(report)
        assert api.column("Name") == ["cudaLaunchKernel"]
        assert api.column("Total Time") == [2000]
        mem = cuda_gpu_mem_time_sum(report)
        assert mem.column("Operation") == ["[CUDA memcpy Host-to-Device]", "[CUDA memset]"]
        m = report.memcpys()
        assert (m["src_kind"][0], m["dst_kind"][0], bool(m["is_async"][0])) == ("Pageable", "Device", False)
        assert bool(report.memsets()["is_async"][0]) is True
        assert set(report.sql("SELECT DISTINCT pid FROM kernel")[0]) == {4242}
        s = report.syncs()
        assert s["type"][0] == "ContextSynchronize" and s["stream_id"].isna()[0]


def test_records_outside_the_buffer_are_copied_too(tmp_path: Path) -> None:
    main = FakeBuffer(cupti)
    _kernel(main, KERNEL_A, 0, 1000, 1)
    _kernel(main, KERNEL_A, 2000, 1000, 2)
    stray = FakeBuffer(cupti)  # a record CUPTI keeps in memory of its own
    stray.add("ActivityMemset4", kind=2, bytes=64, value=0, memory_kind=3, start=T0 + 5000,
              end=T0 + 5100, flags_=0, stream_id=7, correlation_id=3)
    acts = main.activities() + stray.activities()
    spool = tmp_path / "spool"
    spool.mkdir()
    collector = CuptiCollector(SpoolWriter(str(spool), pid=7), {"cuda"}, lambda lvl, m: None)
    collector.bind(cupti, np)
    collector._on_complete(acts[::-1])  # order of delivery does not matter
    assert collector.records == 3 and collector.copied_buffers == 1
    out = tmp_path / "r.gpuscope"
    w = ReportWriter(out)
    w.ingest(str(spool), final=True)
    w.close()
    with Report.open(out) as r:
        assert r.sql("SELECT count(*), sum(end_ns - start_ns) FROM kernel")[0] == (2, 2000)
        assert r.sql("SELECT bytes FROM memset")[0] == (64,)


def _marker(buf: FakeBuffer, flags: int, ts: int, mid: int, tid: int, name: str = "", domain: str = "") -> None:
    fields = dict(kind=12, flags_=flags, timestamp=T0 + ts, id=mid, object_kind=2)
    if name:
        fields["name"] = name
    if domain:
        fields["domain"] = domain
    buf.add("ActivityMarker2", **fields)
    rec = buf.parts[-1][1]
    rec["object_id"]["pt"]["thread_id"] = tid
    rec["object_id"]["pt"]["process_id"] = 4242


def test_nvtx_marker_events_become_ranges(tmp_path: Path) -> None:
    b1, b2 = FakeBuffer(cupti), FakeBuffer(cupti)
    _marker(b1, 2, 0, 1, 77, "step")  # push "step"
    _marker(b1, 2, 100, 2, 77, "forward", "my_domain")  # nested, in a domain
    _marker(b1, 4, 900, 2, 77)  # pop forward
    _marker(b1, 1, 950, 3, 77, "checkpoint")  # a mark
    _marker(b2, 4, 1000, 1, 77)  # pop step, in the next buffer
    _marker(b2, 2, 2000, 4, 78, "never ends")
    with _collect(tmp_path, [b1, b2]) as report:
        r = report.ranges()
        got = {(row.name, row.kind): (row.start_ns - T0, row.end_ns if row.end_ns is None else row.end_ns - T0,
                                      row.domain, row.tid) for row in r.itertuples()}
        assert got[("step", "range")] == (0, 1000, "", 77)
        assert got[("forward", "range")] == (100, 900, "my_domain", 77)
        assert got[("checkpoint", "mark")] == (950, 950, "", 77)
        never = r[r["name"] == "never ends"]
        assert never["end_ns"].isna().all() and list(never["tid"]) == [78]
        assert len(r) == 4
