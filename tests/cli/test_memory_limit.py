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
    monkeypatch.setenv("GPUSCOPE_MEMORY_LIMIT", "20MB")
    with Report.open(real_report) as report:
        (limit, folder) = report.sql("SELECT current_setting('memory_limit'), current_setting('temp_directory')")[0]
        assert limit.endswith("MiB") and 18 <= float(limit.split()[0]) <= 20
        assert Path(folder).name.startswith("gpuscope-spill-")
        report.sql("CREATE TEMP TABLE t AS SELECT range AS a, hash(range) AS b FROM range(6000000)")  # spills
        assert os.path.isdir(folder)
    assert not os.path.exists(folder)


def test_the_limit_cannot_be_changed_by_a_query(real_report: Path, monkeypatch) -> None:
    """The configuration of a report's connection is locked once the report is checked: no query
    (a user's, or one a report would carry) raises the limits or turns file access back on."""
    import pytest

    from gpuscope.errors import QueryError

    monkeypatch.setenv("GPUSCOPE_MEMORY_LIMIT", "300MB")
    with Report.open(real_report) as report:
        for statement in ("SET memory_limit = '64GB'", "SET enable_external_access = true",
                          "SET temp_directory = '.'"):
            with pytest.raises(QueryError):
                report.sql(statement)
        assert report.sql("SELECT current_setting('memory_limit')")[0][0].endswith("MiB")
