"""What the program's flush thread hands over without a Python object per record, made into report
rows by the launcher: logged ranges (PyTorch module calls) paired there, with the ones still open at
the end kept without an end, and launch anchors made ``launch_call`` rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from gpuscope.capture.cupti import launch_anchors
from gpuscope.capture.python.ranges import RangeRecorder
from gpuscope.spool import SpoolWriter
from gpuscope.trace.writer import ReportWriter

PID = 11


class _Hub:
    def on_api_entry(self, names: list[str], handler: Any) -> list[str]:
        return []  # every name watched


def _ingest(tmp_path: Path, flushes: list[dict[str, list[Any]]]) -> duckdb.DuckDBPyConnection:
    spool = tmp_path / "spool"
    spool.mkdir()
    w = SpoolWriter(str(spool), pid=PID)
    for rows in flushes:
        w.write(rows=rows)
    report = ReportWriter(tmp_path / "r.gpuscope")
    report.ingest(str(spool), final=True)
    report.close()
    return duckdb.connect(str(tmp_path / "r.gpuscope"), read_only=True)


def test_module_ranges_are_paired_by_the_launcher_across_flushes(tmp_path: Path) -> None:
    r = RangeRecorder(clock_offset_ns=1_000)
    model, fc = r.kind("Net", "", "torch", "forward"), r.kind("Net.fc", "", "torch", "forward")
    log = r.thread_log()
    log += [10, ~model, 20, ~fc, 30]
    first = r.take_rows()  # Net still open: it ends in the next flush
    step = r.kind("SGD.step", "", "torch", "optimizer")
    log += [40, ~fc, 50, 60, 70, ~step, 80, ~model, 90, ~model]  # a re-entry of Net; Net and the step end never
    log.append(95)
    second = r.take_rows()
    assert set(first) == {"range_kind", "range_log"} and [row[0] for row in second["range_kind"]] == [step]
    second["collector"] = [("ranges", 2, 0, 0, 0, '{"ranges": 2, "ns_per_range": 900}')]  # its pushed ranges
    con = _ingest(tmp_path, [first, second])
    rows = con.sql("""SELECT s.value, r.start_ns, r.end_ns, r.source, r.category, r.pid FROM nvtx_range r
                      JOIN string s ON s.id = r.name_id ORDER BY r.start_ns""").fetchall()
    assert rows == [("Net", 1_010, 1_060, "torch", "forward", PID), ("Net.fc", 1_020, 1_030, "torch", "forward", PID),
                    ("Net.fc", 1_040, 1_050, "torch", "forward", PID),
                    ("SGD.step", 1_070, None, "torch", "optimizer", PID),  # open at the end: kept without an end
                    ("Net", 1_080, None, "torch", "forward", PID), ("Net", 1_090, 1_095, "torch", "forward", PID)]
    said = [m for (m,) in con.sql("SELECT message FROM diagnostic WHERE level = 'info'").fetchall()]
    assert "1 re-entrant calls of a module already running (ranges nested)" in said
    assert len({i for (i,) in con.sql("SELECT id FROM nvtx_range").fetchall()}) == 6
    (records, detail), = con.sql("SELECT records, detail FROM collector WHERE name = 'ranges'").fetchall()
    assert records == 2 + 4  # the ended ones
    assert json.loads(detail) == {"ranges": 6, "ns_per_range": 900, "reentrant_calls": 1, "unbalanced_pops": 0}


def test_anchors_are_handed_over_as_bytes_and_stored_as_launch_calls(tmp_path: Path) -> None:
    anchors = launch_anchors.CallbackAnchors(_Hub(), offset_ns=500)
    assert anchors.take_rows() == {}
    anchors._rows += [(100, 7, 41), (200, 8, 42)]
    first = anchors.take_rows()
    (offset, blob), = first["anchor_log"]
    assert offset == 500 and len(blob) == 2 * 3 * 8
    anchors._rows.append((300, 7, 45))
    con = _ingest(tmp_path, [first, anchors.take_rows()])
    assert con.sql("""SELECT l.start_ns, l.end_ns, l.tid, s.value, l.correlation_id, l.pid FROM launch_call l
                      JOIN string s ON s.id = l.api_name_id ORDER BY 1""").fetchall() == [
        (600, 600, 7, "cuDriverGetVersion", 41, PID), (700, 700, 8, "cuDriverGetVersion", 42, PID),
        (800, 800, 7, "cuDriverGetVersion", 45, PID)]
