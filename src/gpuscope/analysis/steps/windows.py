"""The capture windows of a report as one table: when each process was recorded."""

from __future__ import annotations

from ...trace.report import Report
from ...trace.trim import capture_limited, windows_query

WINDOWS = "gpuscope_windows"


def windows_table(report: Report) -> str:
    """Create the table ``(pid, start_ns, end_ns)`` of the times each process was recorded (one
    window over all time for a process recorded whole); return its name."""
    if not report.sql("SELECT 1 FROM duckdb_tables() WHERE temporary AND table_name = ?", [WINDOWS]):
        report.sql(f"CREATE TEMP TABLE {WINDOWS} AS {windows_query(capture_limited(report.meta))}")
    return WINDOWS
