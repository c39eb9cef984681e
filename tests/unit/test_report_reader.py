"""The connection a report is read through: its limits, what a query on it may reach, and what a
failed query says (the caller's SQL, the time limit), on recorded reports."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from gpuscope.errors import QueryError, ReportError
from gpuscope.trace.report import Report
from gpuscope.trace.report_errors import explain


def test_an_error_in_the_callers_sql_says_so(recorded) -> None:
    with Report.open(recorded("gemm_conv")) as report:
        for query in ("SELEC 1", "SELECT nothing FROM kernel", "SELECT * FROM no_such_table"):
            with pytest.raises(QueryError) as raised:
                report.sql(query)
            text = str(raised.value)
            assert text.startswith("error in the SQL query: ") and "damaged" not in text, text
        assert report.sql("SELECT 1")[0][0] == 1  # the report stays usable


def test_a_query_reaches_no_file_and_loads_no_extension(recorded, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not for a report's queries")
    with Report.open(recorded("gemm_conv")) as report:
        with pytest.raises(QueryError, match="disabled"):
            report.sql(f"SELECT content FROM read_text('{secret}')")
        with pytest.raises(QueryError):
            report.sql(f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'")
        assert not (tmp_path / "out.csv").exists()
        settings = dict(report.sql(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ('enable_external_access', 'lock_configuration', "
            "'autoload_known_extensions', 'autoinstall_known_extensions', 'threads', 'memory_limit')"))
    assert settings["enable_external_access"] == "false" and settings["lock_configuration"] == "true"
    assert settings["autoload_known_extensions"] == "false" and settings["autoinstall_known_extensions"] == "false"
    assert 1 <= int(settings["threads"]) <= (os.cpu_count() or 1)
    assert settings["memory_limit"].endswith(("MiB", "GiB"))


def test_two_readings_of_one_report_in_one_process_keep_their_own_temporary_folder(recorded, monkeypatch) -> None:
    """The first reading spills to its temporary folder; a second reading of the same file (the
    viewer's analyses beside its timeline) opens and queries all the same."""
    path = recorded("gemm_conv")
    monkeypatch.setenv("GPUSCOPE_MEMORY_LIMIT", "20MB")
    with Report.open(path) as first:
        first.sql("CREATE TEMP TABLE t AS SELECT range AS a, hash(range) AS b FROM range(6000000)")  # spills
        with Report.open(path) as second:
            assert second.count("kernel") == first.count("kernel") > 0
            folders = {first.sql("SELECT current_setting('temp_directory')")[0][0],
                       second.sql("SELECT current_setting('temp_directory')")[0][0]}
    assert len(folders) == 2


def test_a_query_past_the_time_limit_is_stopped(recorded) -> None:
    path = recorded("gemm_conv")
    program = textwrap.dedent(f"""
        from gpuscope.trace.report import Report
        from gpuscope.errors import ReportError
        with Report.open({str(path)!r}) as report:
            try:
                report.sql("SELECT count(*) FROM range(100000000000) a WHERE hash(a.range) = 0")
            except ReportError as exc:
                print(exc)
    """)
    env = dict(os.environ, GPUSCOPE_QUERY_TIME_LIMIT="1")
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "ran past the time limit of 1 s" in proc.stdout and "GPUSCOPE_QUERY_TIME_LIMIT" in proc.stdout, proc.stdout


def test_failures_of_the_file_name_their_cause() -> None:
    path = Path("r.gpuscope")
    full = explain(path, duckdb.IOException('IO Error: Could not write file "x.parquet": No space left on device'))
    assert "the disk is full" in str(full) and "damaged" not in str(full)
    denied = explain(path, duckdb.IOException('IO Error: Cannot open file "r.gpuscope": Permission denied'))
    assert "permission denied" in str(denied) and "damaged" not in str(denied)
    damaged = explain(path, duckdb.IOException("IO Error: Corrupt database file: computed checksum does not match"))
    assert isinstance(damaged, ReportError) and "damaged or truncated" in str(damaged)
    assert isinstance(explain(path, duckdb.BinderException("Binder Error: x")), QueryError)


def test_an_unreadable_report_says_permission_denied(tmp_path: Path, recorded, monkeypatch) -> None:
    path = recorded("gemm_conv")
    if os.geteuid() != 0:
        path.chmod(0)
    else:  # root reads any file: the refusal the system would give is made here
        real_open = os.open

        def refuse(name: object, *args: object, **kw: object) -> int:
            if str(name) == str(path):
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(name, *args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(ReportError) as raised:
        Report.open(path)
    assert "permission denied" in str(raised.value) and "damaged" not in str(raised.value)


def test_a_compressed_report_is_told_as_compressed_not_damaged(tmp_path: Path) -> None:
    """Reports travel packed (the test fixtures are gzip files): such a file is not called damaged."""
    import gzip
    import zipfile

    packed = tmp_path / "run.gpuscope.gz"
    packed.write_bytes(gzip.compress(b"not a report, but packed"))
    with pytest.raises(ReportError) as exc:
        Report.open(packed)
    assert "gzip-compressed" in str(exc.value) and "damaged" not in str(exc.value), exc.value
    zipped = tmp_path / "run.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("run.gpuscope", b"x")
    with pytest.raises(ReportError, match="is a zip file"):
        Report.open(zipped)
    plain = tmp_path / "notes.gpuscope"
    plain.write_bytes(b"plain text, not a database" * 10)
    with pytest.raises(ReportError, match="damaged"):  # any other file that is not a report
        Report.open(plain)
