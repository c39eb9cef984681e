"""A reader command that fails says why in one line: gpuscope's own error (exit 3, to be reported),
a report whose rows gpuscope never writes (exit 2, damaged), a full disk; and reports of earlier
versions read together as they read alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from gpuscope.cli import main, stats
from gpuscope.trace.report import Report


def _failing_stats(monkeypatch: pytest.MonkeyPatch, fail) -> None:
    """Make every stats report run ``fail(report)``."""
    monkeypatch.setattr(stats, "stats_reports", lambda: {name: fail for name in stats.STATS_REPORTS})


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_bug_of_gpuscope_is_said_as_its_own(recorded, monkeypatch, capsys) -> None:
    monkeypatch.delenv("GPUSCOPE_DEBUG", raising=False)
    _failing_stats(monkeypatch, lambda report: 1 / 0)
    assert main(["stats", str(recorded("gemm_conv")), "-r", "cuda_gpu_kern_sum"]) == 3
    line = _one_line(capsys)
    assert line.startswith("gpuscope: internal error: ZeroDivisionError"), line
    assert "please report it" in line and "GPUSCOPE_DEBUG=1" in line and "damaged" not in line, line


def test_an_error_in_gpuscopes_own_sql_is_its_own(recorded, monkeypatch, capsys) -> None:
    monkeypatch.delenv("GPUSCOPE_DEBUG", raising=False)
    _failing_stats(monkeypatch, lambda report: report.sql("SELECT no_such_column FROM kernel"))
    assert main(["stats", str(recorded("gemm_conv")), "-r", "cuda_gpu_kern_sum"]) == 3
    line = _one_line(capsys)
    assert line.startswith("gpuscope: internal error: ") and "no_such_column" in line, line


def test_rows_gpuscope_never_writes_make_a_damaged_report(recorded, monkeypatch, capsys) -> None:
    monkeypatch.delenv("GPUSCOPE_DEBUG", raising=False)
    path = recorded("gemm_conv")
    con = duckdb.connect(str(path))
    con.execute("UPDATE kernel SET end_ns = NULL WHERE start_ns % 2 = 0")
    con.close()
    _failing_stats(monkeypatch, lambda report: int(report.sql("SELECT min(end_ns) + NULL FROM kernel")[0][0]))
    assert main(["stats", str(path), "-r", "cuda_gpu_kern_sum"]) == 2
    line = _one_line(capsys)
    assert line.startswith("gpuscope: error: ") and "damaged report (NULLs in kernel.end_ns)" in line, line


class _FullDisk:
    """A connection whose every COPY fails as DuckDB fails on a full disk."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con

    def execute(self, sql: str, *args: object) -> object:
        if sql.lstrip().upper().startswith("COPY"):
            raise duckdb.IOException('IO Error: Could not write file "kernel.parquet": No space left on device')
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._con, name)


def test_a_full_disk_during_parquet_export_says_so(recorded, monkeypatch, tmp_path: Path, capsys) -> None:
    real_open = Report.open.__func__  # type: ignore[attr-defined]

    def open_on_full_disk(cls: type[Report], path: object, *args: object, **kw: object) -> Report:
        report = real_open(cls, path, *args, **kw)
        report.con = _FullDisk(report.con)  # type: ignore[assignment]
        return report

    monkeypatch.setattr(Report, "open", classmethod(open_on_full_disk))
    out = tmp_path / "out.parquet"
    assert main(["export", str(recorded("gemm_conv")), "-f", "parquet", "-o", str(out)]) == 2
    line = _one_line(capsys)
    assert "the disk is full" in line and "damaged" not in line, line
    assert not out.exists() and not list(tmp_path.glob(".out.parquet.*"))


def test_reports_of_an_earlier_version_read_together(recorded, tmp_path: Path, capsys) -> None:
    """cuda_graph was written before reports held an empty kernel_metric table; stats of it alone
    reads it, and so must stats of it with others."""
    older = recorded("cuda_graph")
    other = tmp_path / "other.gpuscope"
    shutil.copyfile(recorded("gemm_conv"), other)
    assert main(["stats", str(older), "-r", "cuda_gpu_kern_sum"]) == 0
    capsys.readouterr()
    assert main(["stats", str(older), str(other), "-r", "fleet_kern_sum", "-f", "csv"]) == 0
    out = capsys.readouterr().out
    assert "cuda_graph" in out and "other" in out, out
