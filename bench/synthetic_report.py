"""Synthetic gpuscope reports of any number of kernel records, for benchmarks.

A report is made with the project's schema (``gpuscope.trace.schema.create_statements()``) and a
``meta`` table filled as ``ReportWriter`` fills it (JSON values, status "complete"), but its rows
are bulk-inserted with DuckDB directly, in batches of about a million: the point is a realistic
file, not exercising the writer. Once it is finished, its stats tables are computed and stored by
the function the writer calls when it closes a report (``gpuscope.run.stored_stats.store``). What the kernels are called, how they are launched and how long
they run comes from :mod:`synthetic_launches` (and :mod:`synthetic_names`).

    from synthetic_report import load_or_make, make_report

    gen = make_report(Path("/tmp/r.gpuscope"), 1_000_000)          # always writes
    gen = load_or_make(Path("/tmp/r.gpuscope"), 1_000_000, seed=3)  # keeps a matching report

The same parameters (records, names, zipf, seed, batch) give the same report. The parameters
other than ``batch`` are recorded in the report's meta (key ``synthetic``), which is how
:func:`load_or_make` recognizes a report it can keep.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import duckdb
import numpy as np
import pandas as pd

import gpuscope
from gpuscope.run import stored_stats
from gpuscope.trace import schema
from synthetic_launches import (
    BASE_NS, COMPUTE_STREAM, CONTEXT_ID, DEVICE_ID, PID, Timeline, build_catalogue, kernel_batch,
)  # fmt: skip

PPID = 48190
COMMAND = ["/usr/bin/python3", "train.py", "--model", "llama-8b", "--steps", "2000"]
CWD = "/home/user/train"


@dataclass
class Generation:
    """A synthetic report: its parameters, its content's shape, and how long writing it took."""

    path: str
    records: int
    names: int  # kernel names asked for
    zipf: float
    seed: int
    distinct_names: int  # kernel names in the kernel table
    configs: int
    strings: int
    span_s: float  # GPU timeline from the first kernel's start to the last one's end
    kernel_busy_share: float  # share of the span with a kernel running
    seconds: float  # time to write the report (0 if reused)
    reused: bool = False
    summaries_seconds: float = 0.0  # time to compute and store its stats tables (0 if reused)


def make_report(path: Path, records: int, names: int = 600, seed: int = 0, *, zipf: float = 1.0,
                batch: int = 1_000_000, log: Callable[[str], None] | None = None, stored: bool = True) -> Generation:
    """Write a complete report of ``records`` kernels at ``path`` (replacing it); with ``stored``
    (and at least ``stored_stats.MIN_OPERATIONS`` kernels) its stats tables stored in it."""
    t0 = time.perf_counter()
    params = {"records": records, "names": names, "zipf": zipf, "seed": seed}
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)
    cat = build_catalogue(names, zipf, np.random.default_rng([seed, 0]))
    rng = np.random.default_rng([seed, 1])
    con = duckdb.connect(str(path))
    try:
        for stmt in schema.create_statements():
            con.execute(stmt)
        _set_meta(con, format=schema.FORMAT_NAME, schema_version=schema.SCHEMA_VERSION,
                  gpuscope_version=gpuscope.__version__, status="recording")
        _insert_frame(con, "string", pd.DataFrame({"id": np.arange(len(cat.strings), dtype=np.int32),
                                                   "value": cat.strings}))
        _insert_frame(con, "kernel_config", cat.configs)
        timeline = Timeline()
        for done in range(0, records, batch):
            n = min(batch, records - done)
            _insert_frame(con, "kernel", kernel_batch(cat, n, timeline, rng))
            if log:
                log(f"  {done + n:,} / {records:,} kernel records ({time.perf_counter() - t0:.0f} s)")
        end_ns = timeline.last_end_ns + 150_000_000
        _side_tables(con, end_ns, records)
        _set_meta(
            con, command=COMMAND, cwd=CWD, host="bench", user="user",
            platform="Linux-6.8.0-x86_64-with-glibc2.39", python="3.11.9", trace=["cuda"],
            not_recorded={"cuda_api": "CUDA API calls (cuda_api_sum, API time in cuda_kern_exec_sum): "
                                      "add --trace cuda-api"},
            started_at="2026-01-15T09:00:00+0000",
            synthetic={"generator": "bench/synthetic_report.py", "parameters": params},
        )
        _set_meta(con, exit_code=0, exit_signal=None, wall_ns=end_ns - BASE_NS, processes=[PID],
                  status="complete")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    made = time.perf_counter() - t0
    # the stats tables, computed and stored as the writer does when it closes a report
    t1 = time.perf_counter()
    problem = stored_stats.store(path) if stored else None
    if problem:
        raise RuntimeError(f"the stats tables were not stored: {problem}")
    return describe(path, seconds=made, summaries_seconds=time.perf_counter() - t1)


def load_or_make(path: Path, records: int, names: int = 600, seed: int = 0, *, zipf: float = 1.0,
                 batch: int = 1_000_000, log: Callable[[str], None] | None = None) -> Generation:
    """The finished synthetic report at ``path`` if made with these parameters, else a new one."""
    params = {"records": records, "names": names, "zipf": zipf, "seed": seed}
    if _parameters(path) == params:
        return describe(path, reused=True)
    return make_report(path, records, names, seed, zipf=zipf, batch=batch, log=log)


def describe(path: Path, seconds: float = 0.0, reused: bool = False, summaries_seconds: float = 0.0) -> Generation:
    """The :class:`Generation` of a synthetic report, read from the file."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        records, lo, hi, busy, distinct = con.execute(
            "SELECT count(*), min(start_ns), max(end_ns), sum(end_ns - start_ns), count(DISTINCT c.name_id) "
            "FROM kernel k JOIN kernel_config c ON c.id = k.config_id").fetchone()  # type: ignore[misc]
        (configs,) = con.execute("SELECT count(*) FROM kernel_config").fetchone()  # type: ignore[misc]
        (strings,) = con.execute("SELECT count(*) FROM string").fetchone()  # type: ignore[misc]
        (synthetic,) = con.execute("SELECT value FROM meta WHERE key = 'synthetic'").fetchone()  # type: ignore[misc]
    finally:
        con.close()
    params = json.loads(synthetic)["parameters"]
    span_ns = hi - lo if records else 0
    return Generation(
        path=str(path), records=records, names=params["names"], zipf=params["zipf"], seed=params["seed"],
        distinct_names=distinct, configs=configs, strings=strings, span_s=span_ns / 1e9,
        kernel_busy_share=float(busy) / span_ns if span_ns else 0.0, seconds=seconds, reused=reused,
        summaries_seconds=summaries_seconds,
    )


def _parameters(path: Path) -> dict[str, Any] | None:
    """The parameters of the finished synthetic report at ``path``; None if it is not one."""
    if not path.exists():
        return None
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return None
    try:
        meta = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}
        (records,) = con.execute("SELECT count(*) FROM kernel").fetchone()  # type: ignore[misc]
        (stored,) = con.execute("SELECT count(*) FROM stats_summary").fetchone()  # type: ignore[misc]
    except (duckdb.Error, ValueError):
        return None
    finally:
        con.close()
    params = (meta.get("synthetic") or {}).get("parameters")
    if meta.get("status") != "complete" or not params or params.get("records") != records:
        return None
    if meta.get("schema_version") != schema.SCHEMA_VERSION or (records >= stored_stats.MIN_OPERATIONS and not stored):
        return None  # written before the stats tables were stored in a report, or they could not be
    return params


def _insert_frame(con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame) -> None:
    con.register("_bench_rows", frame)
    try:
        con.execute(f"INSERT INTO {table} SELECT * FROM _bench_rows")
    finally:
        con.unregister("_bench_rows")


def _set_meta(con: duckdb.DuckDBPyConnection, **items: Any) -> None:
    """As ReportWriter.set_meta: one row per key, the value as JSON."""
    for key, value in items.items():
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, json.dumps(value)])


def _side_tables(con: duckdb.DuckDBPyConnection, end_ns: int, records: int) -> None:
    """The process, its device and context, the collector's counters and the dropped counts."""
    con.execute(
        "INSERT INTO process VALUES (?, ?, ?, ?, ?, ?, ?, 'cupti', ?)",
        [PID, PPID, COMMAND[0], json.dumps(COMMAND), CWD, BASE_NS, end_ns, BASE_NS - 40_000_000_000],
    )
    con.execute(
        "INSERT INTO device VALUES (?, ?, 'NVIDIA H100 80GB HBM3', '9.0', 132, 85045379072, 3352320000, "
        "1980000, 52428800, 1024, 49152, 233472, 65536, 64, 32, 32, 3)",
        [PID, DEVICE_ID],
    )
    con.execute("INSERT INTO context VALUES (?, ?, ?, ?)", [PID, CONTEXT_ID, DEVICE_ID, COMPUTE_STREAM])
    con.execute(
        "INSERT INTO collector VALUES (?, 'cupti', ?, ?, ?, 0, 'kinds=kernel,device,context')",
        [PID, records, max(1, records // 20_000), records * 40],
    )
    con.execute("INSERT INTO dropped VALUES (?, 'cupti', 0), (?, 'gpuscope', 0)", [PID, PID])
