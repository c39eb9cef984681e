"""Memory cut to capture windows when the report is written: what a window keeps (its allocations, the total and
the allocations live at its start, its peak), frees after it, an out-of-memory error outside it, and memory_sum."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from report_builder import ReportBuilder

from gpuscope.analysis.memory.oom import oom_states
from gpuscope.analysis.memory.summaries import memory_sum
from gpuscope.trace.report import Report

COLS = ("ts_ns", "pid", "tid", "device_id", "kind", "address", "bytes", "allocated_bytes", "reserved_bytes",
        "stream_id", "stack_id", "source")
# (time, kind, address, bytes): window [1000, 2000]; an out-of-memory error at 3000
EVENTS = [
    (100, "alloc", 0xA, 64),   # live through the window and at the error
    (200, "alloc", 0xB, 10),   # made and freed before the window
    (300, "free", 0xB, 10),
    (500, "alloc", 0xC, 5),    # live at the start, freed inside
    (1100, "alloc", 0xD, 256),  # the window's temporary
    (1200, "free", 0xC, 5),
    (1300, "free", 0xD, 256),
    (1500, "alloc", 0xE, 8),   # made inside, freed after
    (1600, "alloc", 0xF, 16),  # made inside, live at the error
    (2500, "free", 0xE, 8),
    (2600, "alloc", 0x10, 1000),  # after the window: larger than anything inside it
    (2700, "free", 0x10, 1000),
]


def _report(path: Path, limited: bool = True) -> Report:
    b = ReportBuilder(path)
    b.range("Net.temp", 1050, 1400, 1)
    b.range("Net.keep", 1450, 1700, 1)
    total = 0
    for t, kind, address, n in EVENTS:
        total += n if kind == "alloc" else -n
        b.writer.con.execute(f"INSERT INTO memory_event ({', '.join(COLS)}) VALUES ({', '.join('?' * len(COLS))})",
                             [t, b.pid, 1, -1, kind, address, n, total, None, None, None, "torch-cpu"])
    b.writer.con.execute("INSERT INTO memory_oom VALUES (3000, ?, -1, 4096, 0, 0, 80, 0, '{}')", [b.pid])
    b.writer.con.execute("INSERT INTO capture_window VALUES (?, 1000, 2000, 'gpuscope.start() to gpuscope.stop()')",
                         [b.pid])
    if limited:
        b.writer.set_meta(capture_range={"limited": True, "description": "x", "spec": {"range": "api"}})
    return b.open()


def _rows(r: Report) -> list[tuple[Any, ...]]:
    return r.sql("SELECT ts_ns, kind, address, allocated_bytes FROM memory_event ORDER BY ts_ns, kind")


def test_a_window_keeps_its_events_a_baseline_and_what_was_live_at_its_start(tmp_path: Path) -> None:
    with _report(tmp_path / "w.gpuscope") as r:
        rows = _rows(r)
        trimmed = r.meta["capture_trimmed"]["memory_event"]
    assert rows == [
        (100, "live", 0xA, None), (500, "live", 0xC, None),  # made before, live at the start: no totals
        (1000, "baseline", None, 69),  # the total just before the window
        (1100, "alloc", 0xD, 325), (1200, "free", 0xC, 320), (1300, "free", 0xD, 64),
        (1500, "alloc", 0xE, 72), (1600, "alloc", 0xF, 88),
        (2500, "free", 0xE, None),  # after the window, but it ends an allocation the window made
    ]
    assert trimmed == 4  # B's two events and the two after the window


def test_memory_sum_of_a_window_its_baseline_peak_and_allocations(tmp_path: Path) -> None:
    with _report(tmp_path / "w.gpuscope") as r:
        recs = memory_sum(r).records()
        (oom,) = oom_states(r)
    by = {x["Section"]: x for x in recs if x["Section"].startswith("window")}
    assert by["window: live at start"]["Bytes"] == 69 and by["window: live at start"]["Count"] == 2
    assert by["window: peak"]["Bytes"] == 325 and by["window: peak"]["Kept"] == 256
    assert by["window: peak"]["Time"] == 1100
    assert by["window: allocations"]["Count"] == 3 and by["window: allocations"]["Bytes"] == 256 + 8 + 16
    (peak,) = [x for x in recs if x["Section"] == "peak allocated"]
    assert peak["Bytes"] == 325  # the 1000 bytes after the window are not in the report
    live = [(x["Name"], x["Bytes"]) for x in recs if x["Section"] == "live at peak"]
    assert live == [("Net.temp", 256), ("(no range)", 64), ("(no range)", 5)]
    layers = {x["Name"]: (x["Bytes"], x["Kept"]) for x in recs if x["Section"] == "layer"}
    assert layers == {"Net.temp": (256, -5), "Net.keep": (24, 24)}  # measured from the baseline
    # the error after the window still shows what was live at it: A (before) and G (inside); E was freed
    assert sorted(x.nbytes for x in oom.live) == [16, 64]


def test_counters_of_a_trimmed_report_start_at_the_baseline(tmp_path: Path) -> None:
    with _report(tmp_path / "w.gpuscope") as r:
        values = [v for (v,) in r.sql("""SELECT value FROM host_counter WHERE name = 'cpu.memory_allocated_bytes'
                                         ORDER BY ts_ns""")]
    assert values == [69, 325, 320, 64, 72, 88]


def test_a_run_without_capture_range_keeps_every_memory_event(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "whole.gpuscope")
    for i, (t, kind, address, n) in enumerate(EVENTS):
        b.writer.con.execute("INSERT INTO memory_event (ts_ns, pid, device_id, kind, address, bytes, allocated_bytes,"
                             " source) VALUES (?, ?, -1, ?, ?, ?, ?, 'torch-cpu')", [t, b.pid, kind, address, n, i])
    with b.open() as r:
        assert r.count("memory_event") == len(EVENTS) and "capture_trimmed" not in r.meta
        assert not [x for x in memory_sum(r).records() if x["Section"].startswith("window")]
