"""A damaged-report fuzzer: seeded mutations of recorded reports (tables and columns dropped, columns
retyped, meta values that are not JSON or NULL, NULLs, negative times, zeroed and flipped blocks,
truncation) read by every reader command (stats, analyze, roofline, kernels, export).

Each command must end with exit 0 (the damage did not matter to it) or exit 2 with one
``gpuscope: error:`` line, never a traceback, never a hang (a time limit per report), and the report
file must be left as it was. GPUSCOPE_FUZZ_SEED and GPUSCOPE_FUZZ_CASES choose other and more cases.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

import duckdb
import pytest

from conftest import unpack_fixture

from .conftest import base_env

SEED = int(os.environ.get("GPUSCOPE_FUZZ_SEED", "20261125"))
CASES = int(os.environ.get("GPUSCOPE_FUZZ_CASES", "20"))
FIXTURES = ("gemm_conv", "cpu_balanced")
TIME_LIMIT_S = 90  # for the five commands on one report; a correct run takes a few seconds
TABLES = ("kernel", "kernel_config", "string", "nvtx_range", "torch_op", "process", "cpu_sample", "cpu_stack",
          "cpu_frame", "api_call", "device", "meta")
TIME_COLUMNS = {"kernel": "start_ns", "nvtx_range": "start_ns", "torch_op": "start_ns", "process": "start_ns",
                "cpu_sample": "ts_ns", "api_call": "end_ns"}

# Runs every reader command in one Python (imports paid once), each as the CLI runs it, and prints
# for each its exit code and what it wrote on stderr, as JSON.
DRIVER = textwrap.dedent("""
    import contextlib, io, json, sys, traceback
    from gpuscope.cli import main
    report, out = sys.argv[1], sys.argv[2]
    commands = [["stats", report], ["analyze", report], ["roofline", report], ["kernels", report],
                ["export", report, "-o", out, "--force-overwrite"]]
    results = []
    for argv in commands:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(argv)
            except BaseException:
                code = "raised"
                traceback.print_exc(file=err)
        results.append([argv[0], code, err.getvalue()])
    print(json.dumps(results))
""")


def _sql(path: Path, *statements: str) -> None:
    con = duckdb.connect(str(path))
    try:
        for stmt in statements:
            con.execute(stmt)
        con.execute("CHECKPOINT")
    finally:
        con.close()


def _columns(path: Path, table: str) -> list[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
    finally:
        con.close()


def _bytes(path: Path, rng: random.Random, how: str) -> str:
    data = bytearray(path.read_bytes())
    if how == "truncate":
        cut = rng.randrange(len(data) // 8, len(data))
        path.write_bytes(bytes(data[:cut]))
        return f"truncated to {cut} of {len(data)} bytes"
    size = 4096
    at = rng.randrange(0, len(data) - size) // size * size
    if how == "zero":
        data[at:at + size] = bytes(size)
    else:
        for i in range(at, at + size, 7):
            data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return f"{how} block at {at}"


def _mutate(path: Path, rng: random.Random) -> str:
    """Damage ``path`` one way, chosen by ``rng``; return what was done."""
    kind = rng.choice(["drop_table", "drop_column", "retype", "meta", "nulls", "negative", "zero", "flip",
                       "truncate"])
    table = rng.choice(TABLES)
    if kind in ("zero", "flip", "truncate"):
        return _bytes(path, rng, kind)
    if kind == "drop_table":
        _sql(path, f"DROP TABLE {table}")
        return f"dropped {table}"
    if kind == "meta":
        key = rng.choice(["format", "schema_version", "status", "command", "trace", "not_recorded", "processes"])
        value = rng.choice(["NULL", "'not json'", "'\"4\"'", "'[]'", "'{}'", "'-1'"])
        _sql(path, f"UPDATE meta SET value = {value} WHERE key = '{key}'")
        return f"meta {key} = {value}"
    column = rng.choice(_columns(path, table))
    if kind == "drop_column":
        _sql(path, f'ALTER TABLE {table} DROP COLUMN "{column}"')
        return f"dropped {table}.{column}"
    if kind == "retype":
        _sql(path, f'ALTER TABLE {table} ALTER "{column}" TYPE VARCHAR',
             f"UPDATE {table} SET \"{column}\" = 'x' || \"{column}\"")
        return f"retyped {table}.{column} to text"
    if kind == "nulls":
        _sql(path, f'UPDATE {table} SET "{column}" = NULL WHERE random() < 0.5')
        return f"NULLs in {table}.{column}"
    time_table = rng.choice(sorted(TIME_COLUMNS))
    _sql(path, f"UPDATE {time_table} SET {TIME_COLUMNS[time_table]} = -{TIME_COLUMNS[time_table]} "
               "WHERE random() < 0.3")
    return f"negative {time_table}.{TIME_COLUMNS[time_table]}"


def _cases() -> list[tuple[int, str]]:
    return [(i, FIXTURES[i % len(FIXTURES)]) for i in range(CASES)]


@pytest.mark.parametrize("case, fixture", _cases(), ids=[f"{i}-{f}" for i, f in _cases()])
def test_damaged_report_is_one_line_and_exit_2(tmp_path: Path, case: int, fixture: str) -> None:
    rng = random.Random(SEED * 1000 + case)
    path = unpack_fixture(fixture, tmp_path)
    done = None
    for _ in range(5):  # a mutation DuckDB refuses (a column others depend on) is replaced by another
        try:
            done = _mutate(path, rng)
            break
        except duckdb.Error:
            path = unpack_fixture(fixture, tmp_path)
    assert done is not None
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    try:
        proc = subprocess.run([sys.executable, "-c", DRIVER, str(path), str(tmp_path / "out.trace.json")],
                              capture_output=True, text=True, env=base_env(), timeout=TIME_LIMIT_S, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the reader commands did not finish within {TIME_LIMIT_S} s on a report with: {done}")
    assert proc.returncode == 0, f"{done}\n{proc.stderr}"
    for command, code, stderr in json.loads(proc.stdout.splitlines()[-1]):
        what = f"gpuscope {command} on a report with {done}: exit {code}\n{stderr}"
        assert code in (0, 2), what
        assert "Traceback" not in stderr, what
        if code == 2:
            errors = [line for line in stderr.splitlines() if line.startswith("gpuscope: error:")]
            assert len(errors) == 1 and len(stderr.splitlines()) <= 3, what
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before, f"the report changed ({done})"


def test_mutations_are_seeded() -> None:
    """The same seed damages the same way (a failure can be replayed)."""
    picks: Callable[[], list[float]] = lambda: [random.Random(SEED * 1000 + i).random() for i in range(3)]
    assert picks() == picks()
