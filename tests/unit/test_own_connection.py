"""A report read on a connection of its own (ops.own_connection): the same rows as on the report's
own connection, that connection closed on the way out, and the report itself where its file cannot be
opened again."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import duckdb
import pytest

from gpuscope.analysis.ops.own_connection import own_connection
from gpuscope.trace.report import Report

QUERY = "SELECT pid, count(*), sum(end_ns - start_ns) FROM kernel GROUP BY pid ORDER BY pid"


def test_own_connection_reads_the_same_and_is_closed(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("mlp_api")) as report:
        want = report.sql(QUERY)
        with own_connection(report) as own:
            assert own is not report and own.con is not report.con
            assert own.sql(QUERY) == want
            assert own.sql("SELECT current_setting('memory_limit')") == report.sql(
                "SELECT current_setting('memory_limit')")
        with pytest.raises(duckdb.Error):
            own.con.execute("SELECT 1")
        assert report.sql(QUERY) == want  # the report's own connection goes on


def test_the_report_itself_where_its_file_is_gone(recorded: Callable[[str], Path], tmp_path: Path) -> None:
    copy = tmp_path / "copy.gpuscope"
    copy.write_bytes(recorded("mlp_api").read_bytes())
    with Report.open(copy) as report:
        copy.unlink()
        with own_connection(report) as own:
            assert own is report
