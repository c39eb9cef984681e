"""A report paused with gpuscope.stop() / gpuscope.start() (no capture range asked for) says it
holds the parts outside the pauses, not between them."""

from __future__ import annotations

from pathlib import Path

from gpuscope.analysis.steps.capture import capture_summary
from report_builder import ReportBuilder


def test_paused_run_is_described_the_right_way_round(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "r.gpuscope")
    b.writer.con.execute("INSERT INTO capture_window VALUES (100, 0, 1000, 'api'), (100, 5000, 9000, 'api')")
    with b.open() as report:
        summary = capture_summary(report)
    assert summary is not None and summary.windows == 2
    assert "outside its pauses" in summary.description and "between gpuscope.stop()" not in summary.description
