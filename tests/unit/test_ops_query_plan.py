"""The query that gives every GPU operation its launch point joins the operations placed by their
anchors by hash, never by a nested loop: with the placement condition in its join, DuckDB 1.5
planned a blockwise nested-loop join, and a report of half a million kernels took minutes at the
close of a profile where it now takes a tenth of a second. The launch points are those of the join
with that condition (an operation placed otherwise keeps its own)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuscope.analysis.ops.attribution import OPS
from gpuscope.analysis.ops.sql import op_queries
from gpuscope.trace.report import Report

LOOPS = ("NL_JOIN", "NESTED_LOOP", "CROSS_PRODUCT")


@pytest.mark.parametrize("name", ["client_hf_gpt2_generate", "mlp_api", "client_dataloader_cnn"])
def test_launch_points_join_by_hash_and_match_the_placing_condition(recorded: Callable[[str], Path], name: str) -> None:
    with Report.open(recorded(name)) as report:
        placed, query = op_queries(f"{OPS}_placed")
        report.sql(f"CREATE OR REPLACE TEMP TABLE {OPS}_placed AS {placed}")
        plan = "\n".join(row[1] for row in report.con.execute(f"EXPLAIN {query}").fetchall())
        assert not [w for w in LOOPS if w in plan], plan
        # the join as it was written before: the placed rows only for operations placed by nothing else
        guarded = query.replace(f"LEFT JOIN {OPS}_placed p ON ", f"LEFT JOIN {OPS}_placed p ON b.known IS NULL AND ")
        assert guarded != query
        cols = "kind, pid, correlation_id, start_ns, launch_ns"
        now = report.sql(f"SELECT {cols} FROM ({query}) ORDER BY ALL")
        before = report.sql(f"SELECT {cols} FROM ({guarded}) ORDER BY ALL")
        assert now == before
        unplaced = report.sql(f"SELECT count(*) FROM {OPS}_placed")[0][0]
        assert len(now) == report.sql("SELECT (SELECT count(*) FROM kernel) + (SELECT count(*) FROM memcpy) "
                                      "+ (SELECT count(*) FROM memset) + (SELECT count(*) FROM graph_launch)")[0][0]
        if name.startswith("client_"):  # recorded by default: some operations placed by their anchors
            assert unplaced > 0


def test_a_report_of_a_newer_duckdb_is_not_called_damaged(tmp_path: Path) -> None:
    import duckdb

    from gpuscope.trace.report import _unopenable

    p = tmp_path / "run.gpuscope"
    p.write_bytes(b"\0" * 4096)
    exc = duckdb.IOException("IO Error: Trying to read a database file with version number 69, but we can only "
                             "read versions between 64 and 68.")
    text = str(_unopenable(p, exc))
    assert "damaged" not in text and "newer DuckDB" in text and "storage version 69" in text
    assert duckdb.__version__ in text and "upgrade" in text
    other = str(_unopenable(p, duckdb.IOException("IO Error: The file is not a valid DuckDB database file!")))
    assert "damaged" in other


def test_report_connections_draw_no_progress_bar(recorded: Callable[[str], Path]) -> None:
    # DuckDB draws a progress bar on the terminal for a query of more than a few seconds: among
    # gpuscope's own lines at the end of a profile, or under a table it prints
    with Report.open(recorded("mlp_api")) as report:
        assert report.sql("SELECT current_setting('enable_progress_bar')") == [(False,)]
