"""``gpuscope import`` of Nsight Systems SQLite exports: counts and times equal those of the export,
read here independently with sqlite3."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from import_helpers import shared

from gpuscope.analysis.diff.compare import diff
from gpuscope.analysis.diff.data import run_data
from gpuscope.trace.importers import import_trace
from gpuscope.trace.report import Report

EXPORTS = ["nsys-ai--h100_2gpu_1s.sqlite", "nsys-ai--healthy_1pct.sqlite", "nsys-ai--mfu_2gpu_before.sqlite"]


def _one(con: sqlite3.Connection, sql: str) -> object:
    try:
        return con.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:  # a table this export lacks
        return 0


@pytest.mark.parametrize("name", EXPORTS)
def test_counts_and_times_equal_the_export(name: str, tmp_path: Path) -> None:
    path = shared(f"nsys/{name}")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out = tmp_path / "n.gpuscope"
    import_trace(path, out)
    with Report.open(out) as r:
        assert r.count("kernel") == _one(con, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
        assert r.sql("SELECT sum(end_ns - start_ns) FROM kernel")[0][0] == _one(
            con, 'SELECT sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL')
        theirs = dict(con.execute("SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                                  "ON s.id = k.demangledName GROUP BY 1").fetchall())
        ours = dict(r.sql("SELECT n.value, count(*) FROM kernel k JOIN kernel_config c ON c.id = k.config_id "
                          "JOIN string n ON n.id = c.name_id GROUP BY 1"))
        assert ours == theirs
        assert r.count("memcpy") == _one(con, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
        assert (r.sql("SELECT coalesce(sum(bytes), 0) FROM memcpy")[0][0]
                == (_one(con, "SELECT coalesce(sum(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY") or 0))
        assert r.count("memset") == _one(con, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET")
        assert r.count("api_call") == _one(con, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        assert r.count("sync") == _one(con, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
        assert r.count("nvtx_range") == _one(con, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60)")
        assert r.meta["imported_from"]["format"] == "nsys-sqlite"
        assert "torch_ops" in r.not_recorded()


def test_processes_devices_and_registered_strings(tmp_path: Path) -> None:
    path = shared("nsys/nsys-ai--h100_2gpu_1s.sqlite")
    out = tmp_path / "n.gpuscope"
    import_trace(path, out)
    with Report.open(out) as r:
        # processes decoded from Nsight Systems' global ids; only those with GPU work or calls listed
        assert sorted(r.processes()["pid"]) == [111, 112]
        assert set(r.processes()["executable"]) == {"python3"}
        per_pid = dict(r.sql("SELECT pid, count(DISTINCT device_id) FROM kernel GROUP BY pid"))
        assert per_pid == {111: 1, 112: 1}  # one GPU per process
        assert r.sql("SELECT count(*) FROM nvtx_range r JOIN string s ON s.id = r.name_id "
                     "WHERE s.value LIKE 'aten::%'")[0][0] > 0


def test_diff_of_the_before_after_pair(tmp_path: Path) -> None:
    """The exports' own before/after pair (a fix that made the step faster): diff finds the steps as the
    program's repeating launch pattern and reports the change with an interval."""
    runs = []
    for name in ("nsys-ai--mfu_2gpu_before.sqlite", "nsys-ai--mfu_2gpu_after.sqlite"):
        out = tmp_path / f"{name}.gpuscope"
        import_trace(shared(f"nsys/{name}"), out)
        with Report.open(out) as r:
            runs.append(run_data(r, out.name))
    result = diff([runs[0]], [runs[1]])
    assert min(result.step.steps) >= 5 and result.step.enough
    assert result.step.low is not None and result.step.low <= result.step.change <= result.step.high
