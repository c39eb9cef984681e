"""``gpuscope stats`` and ``gpuscope export`` on files that are not readable reports.

Each must fail with one line ``gpuscope: error: ...`` naming the file, a non-zero exit code and no
traceback; ``export`` must not leave an output file behind.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from dataclasses import dataclass
from typing import Callable

import duckdb
import pytest

from .conftest import Gpuscope, Result, finish


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


def _error_problems(res: Result, name: str) -> list[str]:
    """What is wrong with ``res`` as a one-line error about ``name`` (empty when it is right)."""
    problems = []
    if res.returncode == 0:
        problems.append("exit code 0")
    if "Traceback" in res.stderr:
        problems.append("a traceback on stderr")
    lines = [line for line in res.stderr_lines if line.strip()]
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr, not 1")
    elif not lines[0].startswith("gpuscope: error: ") or name not in lines[0]:
        problems.append(f"the line is not 'gpuscope: error: ...{name}...'")
    return problems


COMMANDS = ("stats", "export")


@dataclass(frozen=True)
class BadRun:
    """One ``gpuscope COMMAND BAD`` run: where it ran, the name it was given, how it ended."""

    cwd: Path
    name: str
    result: Result


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory: pytest.TempPathFactory, real_report: Path) -> dict[tuple[str, str], BadRun]:
    """Every command on every bad file, each in its own directory, all started at once (each run
    is mostly interpreter start-up, so this keeps the module quick)."""
    started = {}
    for command in COMMANDS:
        for case, make in BAD_REPORTS.items():
            d = tmp_path_factory.mktemp(f"{command}-{case}")
            name = make(d, real_report)
            started[(command, case)] = (d, name, Gpuscope(d).start(command, name))
    return {
        key: BadRun(d, name, finish(proc, (key[0], name))) for key, (d, name, proc) in started.items()
    }


@pytest.mark.parametrize("case", list(BAD_REPORTS))
def test_stats_on_bad_report(bad_runs: dict[tuple[str, str], BadRun], case: str) -> None:
    """``gpuscope stats BAD`` is one error line naming BAD, with nothing on stdout."""
    run = bad_runs[("stats", case)]
    problems = _error_problems(run.result, run.name)
    if run.result.stdout:
        problems.append("output on stdout")
    assert not problems, f"{problems}\n{run.result.describe()}"


@pytest.mark.parametrize("case", list(BAD_REPORTS))
def test_export_on_bad_report(bad_runs: dict[tuple[str, str], BadRun], case: str) -> None:
    """``gpuscope export BAD`` is one error line naming BAD, and leaves no trace file behind."""
    run = bad_runs[("export", case)]
    problems = _error_problems(run.result, run.name)
    leftover = sorted(p.name for p in run.cwd.glob("*.trace.json"))
    if leftover:
        problems.append(f"left behind {leftover}")
    assert not problems, f"{problems}\n{run.result.describe()}"


def test_schema_999_report_says_upgrade(bad_runs: dict[tuple[str, str], BadRun]) -> None:
    """A report from a newer gpuscope names the version and tells the user to upgrade."""
    for command in COMMANDS:
        res = bad_runs[(command, "schema-999")].result
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
