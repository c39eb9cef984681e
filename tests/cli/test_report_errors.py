"""``gpuscope stats`` and ``gpuscope export`` on files that are not readable reports.

Each must fail with one line ``gpuscope: error: ...`` naming the file, a non-zero exit code and no
traceback; ``export`` must not leave an output file behind.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable

import duckdb
import pytest

from .conftest import Gpuscope, Result


def _missing(d: Path, real: Path) -> str:
    return "missing.gpuscope"


def _directory(d: Path, real: Path) -> str:
    (d / "adir.gpuscope").mkdir()
    return "adir.gpuscope"


def _random_bytes(d: Path, real: Path) -> str:
    (d / "random.gpuscope").write_bytes(os.urandom(64 * 1024))
    return "random.gpuscope"


def _truncated(d: Path, real: Path) -> str:
    data = real.read_bytes()
    (d / "truncated.gpuscope").write_bytes(data[: len(data) // 2])
    return "truncated.gpuscope"


def _other_duckdb(d: Path, real: Path) -> str:
    con = duckdb.connect(str(d / "other.gpuscope"))
    con.execute("CREATE TABLE numbers (x INTEGER)")
    con.execute("INSERT INTO numbers VALUES (1), (2)")
    con.close()
    return "other.gpuscope"


def _future_version(d: Path, real: Path) -> str:
    path = d / "future.gpuscope"
    shutil.copyfile(real, path)
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [json.dumps(999)])
    con.close()
    return "future.gpuscope"


BAD_REPORTS: dict[str, Callable[[Path, Path], str]] = {
    "missing": _missing,
    "directory": _directory,
    "random-bytes": _random_bytes,
    "truncated": _truncated,
    "other-duckdb": _other_duckdb,
    "schema-999": _future_version,
}


def _assert_one_line_error(res: Result, name: str) -> None:
    assert res.returncode != 0, res.describe()
    assert "Traceback" not in res.stderr, res.describe()
    lines = [line for line in res.stderr_lines if line.strip()]
    assert len(lines) == 1, res.describe()
    assert lines[0].startswith("gpuscope: error: "), res.describe()
    assert name in lines[0], res.describe()


@pytest.mark.parametrize("case", list(BAD_REPORTS))
def test_stats_on_bad_report(gs: Gpuscope, real_report: Path, case: str) -> None:
    """``gpuscope stats BAD`` is one error line naming BAD, with nothing on stdout."""
    name = BAD_REPORTS[case](gs.cwd, real_report)
    res = gs.run("stats", name)
    _assert_one_line_error(res, name)
    assert res.stdout == ""


@pytest.mark.parametrize("case", list(BAD_REPORTS))
def test_export_on_bad_report(gs: Gpuscope, real_report: Path, case: str) -> None:
    """``gpuscope export BAD`` is one error line naming BAD, and leaves no .trace.json behind."""
    name = BAD_REPORTS[case](gs.cwd, real_report)
    res = gs.run("export", name)
    _assert_one_line_error(res, name)
    assert list(gs.cwd.glob("*.trace.json")) == []


def test_schema_999_report_says_upgrade(gs: Gpuscope, real_report: Path) -> None:
    """A report from a newer gpuscope tells the user what to do about it."""
    name = _future_version(gs.cwd, real_report)
    res = gs.run("stats", name)
    assert "999" in res.stderr and "upgrade" in res.stderr, res.describe()


def test_good_report_reads(gs: Gpuscope, real_report: Path) -> None:
    """Control: the real report the bad ones are made from works with stats and export."""
    shutil.copyfile(real_report, gs.cwd / "good.gpuscope")
    stats = gs.run("stats", "good.gpuscope")
    assert stats.returncode == 0, stats.describe()
    assert "Traceback" not in stats.stderr
    export = gs.run("export", "good.gpuscope")
    assert export.returncode == 0, export.describe()
    trace = json.loads((gs.cwd / "good.trace.json").read_text())
    assert trace, "the chrome trace is empty"
