"""A report is data: the reader commands never run what a report file stores, never read a file it
names, and never wait on a path that is not a regular file.

Each hostile report is a real report with one object added or swapped in (a view standing for one
of its tables, a macro over a built-in function, a sequence, an index, a computed column, a table
that no report has). Every reader command (stats, analyze, export, report, roofline, kernels, view)
must refuse it with one ``gpuscope: error:`` line naming what it holds, exit 2, within seconds, and
print nothing of the file the view would read. A FIFO given as the report is refused the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

import duckdb
import pytest

from .conftest import base_env

SECRET = "gpuscope-test-secret-4f1d2c"
TIME_LIMIT_S = 60  # for the seven commands on one report; each refusal takes well under a second

# Runs every reader command in one Python, as the CLI runs it; prints for each its exit code and
# everything it wrote, as JSON.
DRIVER = textwrap.dedent("""
    import contextlib, io, json, sys, traceback
    from gpuscope.cli import main
    report, out = sys.argv[1], sys.argv[2]
    commands = [["stats", report, "-f", "csv"], ["analyze", report], ["roofline", report], ["kernels", report],
                ["export", report, "-o", out + ".trace.json", "--force-overwrite"],
                ["export", report, "-f", "parquet", "-o", out + ".parquet", "--force-overwrite"],
                ["report", report, "-o", out + ".html", "--force-overwrite"],
                ["view", report, "--no-browser", "--no-cache"]]
    results = []
    for argv in commands:
        err, std = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
            try:
                code = main(argv)
            except BaseException:
                code = "raised"
                traceback.print_exc(file=err)
        results.append([argv[0], code, err.getvalue(), std.getvalue()])
    print(json.dumps(results))
""")


def _alter(path: Path, *statements: str) -> None:
    con = duckdb.connect(str(path))
    try:
        for stmt in statements:
            con.execute(stmt)
        con.execute("CHECKPOINT")
    finally:
        con.close()


def _view_reads_a_file(path: Path, secret: Path) -> str:
    quoted = str(secret).replace("'", "''")
    _alter(path, "ALTER TABLE string RENAME TO string_kept",
           f"CREATE VIEW string AS SELECT id, value FROM string_kept UNION ALL "
           f"SELECT id, content AS value FROM (SELECT id FROM string_kept) CROSS JOIN read_text('{quoted}')")
    return "a view named string"


def _view_never_ends(path: Path, secret: Path) -> str:
    _alter(path, "ALTER TABLE kernel RENAME TO kernel_kept",
           "CREATE VIEW kernel AS SELECT k.* FROM kernel_kept k, range(100000000000)")
    return "a view named kernel"


def _table_macro(path: Path, secret: Path) -> str:
    _alter(path, "CREATE MACRO rank() AS TABLE SELECT * FROM range(100000000000)")
    return "a table macro named rank"


def _macro_over_a_builtin(path: Path, secret: Path) -> str:
    _alter(path, "CREATE MACRO lower(x) AS 'replaced'")
    return "a macro named lower"


def _sequence(path: Path, secret: Path) -> str:
    _alter(path, "CREATE SEQUENCE ids")
    return "a sequence named ids"


def _index(path: Path, secret: Path) -> str:
    _alter(path, "CREATE INDEX by_start ON kernel (start_ns)")
    return "an index named by_start"


def _computed_column(path: Path, secret: Path) -> str:
    _alter(path, "ALTER TABLE kernel RENAME TO kernel_kept",
           "CREATE TABLE kernel AS SELECT * EXCLUDE (graph_node_id) FROM kernel_kept",
           "ALTER TABLE kernel ADD COLUMN graph_node_id BIGINT DEFAULT 7", "DROP TABLE kernel_kept")
    return "column kernel.graph_node_id has a stored default or computed value"


def _foreign_table(path: Path, secret: Path) -> str:
    _alter(path, "CREATE TABLE notes (text VARCHAR)")
    return "a table named notes"


HOSTILE: dict[str, Callable[[Path, Path], str]] = {
    "view-reads-a-file": _view_reads_a_file,
    "view-never-ends": _view_never_ends,
    "table-macro": _table_macro,
    "macro-over-a-builtin": _macro_over_a_builtin,
    "sequence": _sequence,
    "index": _index,
    "computed-column": _computed_column,
    "foreign-table": _foreign_table,
}


def _run_all(report: Path, cwd: Path) -> list[list[object]]:
    """Every reader command on ``report``; fails the test when they do not end in time."""
    try:
        proc = subprocess.run([sys.executable, "-c", DRIVER, str(report), str(cwd / "out")], capture_output=True,
                              text=True, env=base_env(), timeout=TIME_LIMIT_S, cwd=cwd)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the reader commands did not end within {TIME_LIMIT_S} s on {report.name}")
    assert proc.returncode == 0, proc.stderr
    results: list[list[object]] = json.loads(proc.stdout.splitlines()[-1])
    return results


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_report_holding_more_than_tables_is_refused(tmp_path: Path, recorded, case: str) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    path = tmp_path / "hostile.gpuscope"
    shutil.copyfile(recorded("gemm_conv"), path)
    holds = HOSTILE[case](path, secret)
    for command, code, stderr, stdout in _run_all(path, tmp_path):
        what = f"gpuscope {command} on a report with {holds}: exit {code}\n{stderr}"
        assert code == 2, what
        assert SECRET not in str(stderr) + str(stdout), what
        lines = [line for line in str(stderr).splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("gpuscope: error: "), what
        assert holds in lines[0] and "hostile.gpuscope" in lines[0], what
    assert not list(tmp_path.glob("out.*")), "an output was written for a refused report"


def test_the_unaltered_report_reads(tmp_path: Path, recorded) -> None:
    """Control: the report the hostile ones are made from passes every check (view, which serves
    until stopped, is left out)."""
    from gpuscope.cli import main

    path = recorded("gemm_conv")
    for argv in (["stats", str(path), "-f", "csv"], ["kernels", str(path)],
                 ["export", str(path), "-f", "parquet", "-o", str(tmp_path / "out.parquet")]):
        assert main(argv) == 0, argv
    assert (tmp_path / "out.parquet" / "kernel.parquet").is_file()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    path = tmp_path / "pipe.gpuscope"
    os.mkfifo(path)
    for command, code, stderr, _ in _run_all(path, tmp_path):
        what = f"gpuscope {command} on a FIFO: exit {code}\n{stderr}"
        lines = [line for line in str(stderr).splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1, what
        assert "pipe.gpuscope" in lines[0] and "FIFO" in lines[0] and "not a regular file" in lines[0], what
