"""The memory a report's reader may give DuckDB (GPUSCOPE_MEMORY_LIMIT), as a user meets it: a
limit too small for the work says so in one line and exits 2, a limit that is not a size likewise,
and the spill folder goes with the report."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gpuscope.trace.report import Report

from .conftest import Gpuscope, base_env


def test_too_little_memory_says_how_to_give_more(gs: Gpuscope, recorded) -> None:
    shutil.copyfile(recorded("mlp_api"), gs.cwd / "r.gpuscope")
    res = gs.run("stats", "r.gpuscope", "-r", "nvtx_gpu_proj_sum", env=base_env({"GPUSCOPE_MEMORY_LIMIT": "1KB"}))
    assert res.returncode == 2, res.describe()
    assert "Traceback" not in res.stderr
    assert len(res.errors) == 1 and "GPUSCOPE_MEMORY_LIMIT higher" in res.errors[0], res.describe()


def test_a_limit_that_is_not_a_size_is_refused(gs: Gpuscope, real_report: Path) -> None:
    shutil.copyfile(real_report, gs.cwd / "r.gpuscope")
    res = gs.run("stats", "r.gpuscope", "-r", "nvtx_sum", env=base_env({"GPUSCOPE_MEMORY_LIMIT": "lots"}))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.describe()
    assert len(res.errors) == 1 and "GPUSCOPE_MEMORY_LIMIT='lots' is not a size" in res.errors[0], res.describe()
    ok = gs.run("stats", "r.gpuscope", "-r", "nvtx_sum", env=base_env({"GPUSCOPE_MEMORY_LIMIT": "300MB"}))
    assert ok.returncode == 0, ok.describe()


def test_the_limit_is_set_and_the_spill_folder_removed(real_report: Path, monkeypatch) -> None:
    monkeypatch.setenv("GPUSCOPE_MEMORY_LIMIT", "300MB")
    with Report.open(real_report) as report:
        (limit, folder) = report.sql("SELECT current_setting('memory_limit'), current_setting('temp_directory')")[0]
        assert limit.endswith("MiB") and 280 <= float(limit.split()[0]) <= 300
        assert Path(folder).name.startswith("gpuscope-spill-")
        report.sql("SET memory_limit = '20MB'")  # made to spill, so that the folder is there
        report.sql("CREATE TEMP TABLE t AS SELECT range AS a, hash(range) AS b FROM range(6000000)")
        assert os.path.isdir(folder)
    assert not os.path.exists(folder)


def test_a_size_duckdb_will_not_take_now_asks_for_more(real_report: Path, monkeypatch) -> None:
    """DuckDB refuses a limit below the memory the open report already holds: that is too little
    memory, not a malformed size."""
    import duckdb
    import pytest

    from gpuscope.errors import ReportError

    report = Report.open(real_report)
    try:
        class Refusing:
            def execute(self, sql: str, *a: object) -> None:
                if "memory_limit" in sql:
                    raise duckdb.InvalidInputException("Failed to set memory limit: usage is above the new limit")

        real, report.con = report.con, Refusing()  # type: ignore[assignment]
        monkeypatch.setenv("GPUSCOPE_MEMORY_LIMIT", "1KB")
        with pytest.raises(ReportError, match="GPUSCOPE_MEMORY_LIMIT higher"):
            report._bound_memory()
        monkeypatch.setenv("GPUSCOPE_MEMORY_LIMIT", "lots")
        with pytest.raises(ReportError, match="is not a size"):
            report._bound_memory()
    finally:
        report.con = real
        report.close()
