"""Memory: the CPU tensor recorder in this process, the CUDA allocator history's totals, memory_sum, counters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from report_builder import ReportBuilder

from gpuscope.analysis.memory.summaries import memory_sum
from gpuscope.capture.python.cuda_memory import CudaMemory
from gpuscope.capture.python.stacks import StackTable
from gpuscope.capture.python.torch_memory import MemoryTotals, TorchMemory
from gpuscope.trace import chrome
from gpuscope.trace.report import Report

torch = pytest.importorskip("torch")
MIB = 1 << 20
COLS = ("ts_ns", "pid", "tid", "device_id", "kind", "address", "bytes", "allocated_bytes", "reserved_bytes",
        "stream_id", "stack_id", "source")


class Temp(torch.nn.Module):
    def forward(self, x: Any) -> Any:
        t = torch.ones(64 * MIB)  # float32: a 256 MiB temporary, freed before the forward returns
        return x + t[:1].sum()


def _record(fn: Any, **kw: Any) -> tuple[TorchMemory, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    said: list[tuple[str, str]] = []
    rec = TorchMemory(0, StackTable(), lambda level, msg: said.append((level, msg)), **kw)
    rec.install(torch)
    try:
        fn()
    finally:
        rec.close()
    rows = rec.take_rows()
    assert not said
    return rec, rows.get("memory_event", []), rows.get("dropped", [])


def test_a_256_mib_temporary_is_one_allocation_and_one_free_of_256_mib() -> None:
    layer, x = Temp(), torch.zeros(16)
    rec, rows, _ = _record(lambda: layer(x))
    big = [r for r in rows if r[5] == 256 * MIB]
    assert [r[3] for r in big] == ["alloc", "free"]
    assert big[0][4] == big[1][4]  # the same storage
    assert big[0][9] is not None  # a stack, for an allocation of 1 MiB or more
    assert rec.totals.peak >= 256 * MIB and rec.totals.peak < 256 * MIB + MIB
    assert 256 * MIB - 4096 <= big[0][6] - big[1][6] <= 256 * MIB  # the running total after the free


def test_frees_of_storage_made_before_recording_are_not_seen_and_totals_stay_at_or_above_zero() -> None:
    before = [torch.ones(MIB) for _ in range(4)]

    def work() -> None:
        before.clear()  # 16 MiB freed that the recorder never saw allocated
        torch.ones(MIB)

    rec, rows, _ = _record(work)
    assert all(r[6] >= 0 for r in rows)
    assert [r[3] for r in rows if r[5] == 4 * MIB] == ["alloc", "free"]
    assert rec.totals.allocated == 0


def test_many_small_allocations_are_summarized_with_a_dropped_count_and_exact_totals() -> None:
    keep: list[Any] = []

    def work() -> None:
        for _ in range(3000):
            keep.append(torch.empty(8))  # 32 bytes each
        keep.append(torch.empty(MIB // 4))  # 1 MiB: always kept

    rec, rows, dropped = _record(work, small_budget=100)
    small = [r for r in rows if r[3] == "alloc" and r[5] == 32]
    assert len(small) == 100 and dropped == [("memory", 2900)]
    assert rec.counts["allocations"] == 3001
    big = [r for r in rows if r[5] == MIB]
    assert big and big[0][6] == 3000 * 32 + MIB  # the total counts what was dropped
    keep.clear()


def test_the_interval_peak_on_a_dropped_event_gets_a_peak_row() -> None:
    totals = MemoryTotals()
    totals.add(100, 1, kept=True)
    totals.add(50, 2, kept=False)
    assert totals.take_peak() == (2, 150)
    totals.add(-150, 3, kept=False)
    totals.add(-10, 4, kept=True)  # a free of something never seen allocated: no negative total
    assert totals.allocated == 0 and totals.peak == 150


def _entries() -> list[dict[str, Any]]:
    return [
        {"action": "segment_alloc", "addr": 1000, "size": 20 * MIB, "stream": 0, "time_us": 10},
        {"action": "alloc", "addr": 1000, "size": 2 * MIB, "stream": 0, "time_us": 11,
         "frames": [{"filename": "train.py", "line": 7, "name": "forward"}]},
        {"action": "alloc", "addr": 3000000, "size": 8 * MIB, "stream": 0, "time_us": 12, "frames": []},
        {"action": "free_requested", "addr": 1000, "size": 2 * MIB, "stream": 0, "time_us": 13},
        {"action": "free_completed", "addr": 1000, "size": 2 * MIB, "stream": 0, "time_us": 13},
        {"action": "free_requested", "addr": 55, "size": 1 * MIB, "stream": 0, "time_us": 14},  # made before
    ]


def test_cuda_totals_are_counted_back_from_the_allocators_counters() -> None:
    rec = CudaMemory(0, StackTable(), lambda *a: None, max_entries=1000)
    # before recording: 1 MiB allocated in a 2 MiB segment; now: 8 MiB live, 22 MiB reserved
    stats = {"allocated_bytes.all.current": 8 * MIB, "reserved_bytes.all.current": 22 * MIB,
             "allocated_bytes.all.peak": 11 * MIB}
    rows = rec.device_rows(0, _entries(), stats, epoch_to_session=-5000)
    assert [r[3] for r in rows] == ["segment_alloc", "alloc", "alloc", "free", "free"]
    assert [r[6] for r in rows] == [MIB, 3 * MIB, 11 * MIB, 9 * MIB, 8 * MIB]
    assert [r[7] for r in rows] == [22 * MIB] * 5
    assert rows[0][0] == 10_000 - 5000
    assert rows[1][9] is not None and rows[2][9] is None  # a stack for 1 MiB and more, from its frames
    assert "dropped" not in rec.take_rows()


def test_cuda_peak_lost_from_the_ring_is_kept_and_the_loss_counted() -> None:
    rec = CudaMemory(0, StackTable(), lambda *a: None, max_entries=6)
    stats = {"allocated_bytes.all.current": 8 * MIB, "reserved_bytes.all.current": 22 * MIB,
             "allocated_bytes.all.peak": 40 * MIB, "allocation.all.allocated": 10, "allocation.all.freed": 6}
    rows = rec.device_rows(0, _entries(), stats, epoch_to_session=0)
    assert rows[-1][3] == "peak" and rows[-1][6] == 40 * MIB
    assert rec.take_rows()["dropped"] == [("memory", 16 - 4)]


def _memory_report(path: Path) -> Report:
    """A process: steps of a layer that adds a 256 MiB temporary and keeps 1 MiB, on the CPU; and a GPU."""
    b = ReportBuilder(path)
    rows = []
    total = 0
    for step in range(3):
        t0 = 1_000_000 * (step + 1)
        b.range("Net", t0, t0 + 500_000, 1)
        b.range("Net.temp", t0 + 100_000, t0 + 400_000, 1)
        b.mark("step", t0 + 600_000, 1)
        for dt, kind, address, n in ((150_000, "alloc", 7, 256 * MIB), (200_000, "alloc", 100 + step, MIB),
                                     (300_000, "free", 7, 256 * MIB)):
            total += n if kind == "alloc" else -n
            rows.append((t0 + dt, b.pid, 1, -1, kind, address, n, total, None, None, None, "torch-cpu"))
    rows.append((3_500_000, b.pid, None, 0, "alloc", 9, 2 * 1024 * MIB, 2 * 1024 * MIB, 4 * 1024 * MIB, 7, None,
                 "torch-cuda"))
    for row in rows:
        b.writer.con.execute(f"INSERT INTO memory_event ({', '.join(COLS)}) VALUES ({', '.join('?' * len(COLS))})",
                             list(row))
    return b.open()


def test_memory_sum_shows_the_layer_peak_the_live_allocations_and_the_gpu_totals(tmp_path: Path) -> None:
    with _memory_report(tmp_path / "m.gpuscope") as r:
        table = memory_sum(r)
    recs = table.records()
    layer = {x["Name"]: x for x in recs if x["Section"] == "layer" and x["Device"] == "cpu"}
    assert layer["Net.temp"]["Bytes"] == 257 * MIB and layer["Net.temp"]["Kept"] == MIB  # both live at once
    assert layer["Net.temp"]["Count"] == 3
    peak = [x for x in recs if x["Section"] == "peak allocated" and x["Device"] == "cpu"]
    assert peak[0]["Bytes"] == 256 * MIB + 3 * MIB
    live = [x for x in recs if x["Section"] == "live at peak" and x["Device"] == "cpu"]
    assert [x["Bytes"] for x in live] == [256 * MIB, MIB, MIB, MIB]
    assert live[0]["Name"] == "Net.temp"
    gpu = {x["Section"]: x["Bytes"] for x in recs if x["Device"] == "gpu0"}
    assert gpu["peak allocated"] == 2 * 1024 * MIB and gpu["peak reserved"] == 4 * 1024 * MIB
    assert gpu["reserved not allocated (max)"] == 2 * 1024 * MIB
    steps = [x for x in recs if x["Section"] == "step" and x["Device"] == "cpu"]
    assert [x["Bytes"] for x in steps][:2] == [256 * MIB + MIB, 256 * MIB + 2 * MIB]


def test_memory_counters_and_the_peak_mark_are_in_the_chrome_export(tmp_path: Path) -> None:
    with _memory_report(tmp_path / "m.gpuscope") as r:
        events = list(chrome.events(r))
    counters = [e for e in events if e["ph"] == "C" and e["name"] == "cpu.memory_allocated_bytes"]
    assert len(counters) == 9 and max(e["args"]["value"] for e in counters) == 256 * MIB + 3 * MIB
    assert [e["name"] for e in events if e["ph"] == "C" and e["name"].startswith("gpu0.")] == [
        "gpu0.memory_allocated_bytes", "gpu0.memory_reserved_bytes"]
    marks = [e for e in events if e.get("cat") == "memory"]
    assert {e["name"]: e["args"]["bytes"] for e in marks} == {"cpu peak allocated": 256 * MIB + 3 * MIB,
                                                              "gpu0 peak allocated": 2 * 1024 * MIB}


def test_long_series_are_bucketed_keeping_the_peak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.trace import memory_counters

    monkeypatch.setattr(memory_counters, "MAX_SAMPLES", 10)
    b = ReportBuilder(tmp_path / "m.gpuscope")
    for i in range(1000):
        value = 5000 if i == 777 else i
        b.writer.con.execute("INSERT INTO memory_event (ts_ns, pid, device_id, kind, bytes, allocated_bytes) "
                             "VALUES (?, ?, -1, 'alloc', 1, ?)", [i, b.pid, value])
    with b.open() as r:
        samples = r.sql("SELECT ts_ns, value FROM host_counter WHERE name = 'cpu.memory_allocated_bytes'")
    assert len(samples) <= 11 and (777, 5000.0) in samples


def test_a_report_without_memory_tables_opens_with_an_empty_memory_sum(recorded: Any) -> None:
    with Report.open(recorded("mlp_default")) as r:
        assert r.count("memory_event") == 0
        table = memory_sum(r)
    assert table.rows == [] and table.notes == ["No memory events were recorded."]


def test_gpu_memory_rule_uses_the_programs_own_peak_over_nvml(tmp_path: Path) -> None:
    from diagnosis_sim import Sim

    from gpuscope.analysis.diagnosis import diagnose

    sim = Sim(tmp_path / "r.gpuscope")
    for _ in range(8):
        for _ in range(200):
            sim.kernel("add", 3_000, launch_cost=15_000)
        sim.step()
    sim.memory(60 * 10**9)  # NVML: 60 GB used on the 80 GB GPU (another process holds most of it)
    sim._add("memory_event", COLS, (sim.host, sim.b.pid, None, 0, "alloc", 1, 9 * 10**9, 9 * 10**9, 10 * 10**9,
                                    7, None, "torch-cuda"))
    with sim.open() as report:
        diag = diagnose(report)
    mem = [f for f in diag.findings if f.rule == "gpu_memory"]
    assert len(mem) == 1 and mem[0].data["peak_bytes"] == 10 * 10**9 and mem[0].data["factor"] == 4
    assert "the program's own peak reserved" in mem[0].evidence[0]


def _oom_report(path: Path, requested: int, free: int, reserved: int) -> Report:
    """3 GiB held by Net.big, 1 GiB by Net.small, then an out-of-memory error in Net.huge."""
    gib = 1024 * MIB
    b = ReportBuilder(path)
    b.range("Net.big", 100, 200, 1)
    b.range("Net.small", 300, 400, 1)
    b.range("Net.huge", 500, 600, 1)
    rows = [(150, b.pid, None, 0, "alloc", 1 << 32, 3 * gib, 3 * gib, 4 * gib, 7, None, "torch-cuda"),
            (350, b.pid, None, 0, "alloc", 1 << 34, gib, 4 * gib, 4 * gib, 7, None, "torch-cuda")]
    for row in rows:
        b.writer.con.execute(f"INSERT INTO memory_event ({', '.join(COLS)}) VALUES ({', '.join('?' * len(COLS))})",
                             list(row))
    b.writer.con.execute("INSERT INTO memory_oom VALUES (550, ?, 0, ?, ?, ?, ?, ?, '{}')",
                         [b.pid, requested, free, reserved, 4 * gib, 80 * gib])
    return b.open()


def test_out_of_memory_state_and_what_would_fit(tmp_path: Path) -> None:
    from gpuscope.analysis.diagnosis.rules.out_of_memory import OutOfMemory
    from gpuscope.analysis.memory.oom import oom_states

    gib = 1024 * MIB
    with _oom_report(tmp_path / "a.gpuscope", requested=4 * gib, free=1 * gib, reserved=4 * gib) as r:
        (s,) = oom_states(r)
        table = memory_sum(r).records()
    assert [(x.layer, x.nbytes) for x in s.live] == [("Net.big", 3 * gib), ("Net.small", gib)]
    assert s.shortfall == 3 * gib and not s.fragmentation
    assert s.checkpoint_layers() == [("Net.big", 3 * gib)]
    assert s.micro_batch_divisor() == 2  # (4 GiB held + 4 GiB asked) / (8 - 3 GiB missing) -> 2
    live = [x for x in table if x["Section"] == "live at out of memory"]
    assert [x["Name"] for x in live] == ["Net.big", "Net.small"]
    # 2 GiB cached but unused and 3 GiB free: enough without fragmentation
    with _oom_report(tmp_path / "b.gpuscope", requested=4 * gib, free=3 * gib, reserved=6 * gib) as r:
        (f,) = OutOfMemory().evaluate(_context(r))
    assert f.data["fragmentation"] is True and "expandable_segments:True" in f.fix


def _context(report: Report) -> Any:
    from gpuscope.analysis.diagnosis.context import Context

    return Context(report)
