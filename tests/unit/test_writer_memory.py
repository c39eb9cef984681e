"""The report writer's memory does not grow with the report: DuckDB's cache is held to a limit
while chunks are ingested, and nothing is kept per ingested row in Python (the launcher runs for
as long as the program does)."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

from gpuscope.spool import SpoolWriter
from gpuscope.trace.writer import INGEST_MEMORY, ReportWriter

NAMES = [f"aten::op{i}" for i in range(40)]


def _mib(text: str) -> float:
    number, unit = text.split()
    return float(number) * {"KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0, "bytes": 1 / 2**20}[unit]


def _duckdb_cache_mib(w: ReportWriter) -> float:
    return float(w.con.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchall()[0][0]) / 2**20


SHAPES = np.array([f"[[{k},64],[64,{k % 7}]]" for k in range(1000)], dtype=object)


def _ops(n: int, seed: int) -> pd.DataFrame:
    """``n`` operator rows with random times and shapes (they compress to about 12 bytes a row)."""
    rng = np.random.default_rng(seed)
    start = seed * 10**12 + np.cumsum(rng.integers(1, 10**7, n))
    return pd.DataFrame({"start_ns": start, "end_ns": start + rng.integers(1, 10**6, n), "pid": 7, "tid": 7,
                         "name_id": rng.integers(0, 40, n).astype(np.int32), "seq": rng.integers(0, 2**40, n),
                         "shapes": SHAPES[rng.integers(0, 1000, n)]})


def test_the_writers_duckdb_cache_is_bounded_whatever_the_report_size(tmp_path: Path) -> None:
    default = ReportWriter(tmp_path / "default.gpuscope")
    limit = default.con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert _mib(limit) <= 256 and _mib(limit) >= _mib(INGEST_MEMORY.replace("MB", " MiB")) * 0.9, limit
    default.close()

    w = ReportWriter(tmp_path / "r.gpuscope", memory_limit="16MB")
    for i in range(12):
        w._insert("torch_op", _ops(250_000, i))
    size_mib = (tmp_path / "r.gpuscope").stat().st_size / 2**20 + (tmp_path / "r.gpuscope.wal").stat().st_size / 2**20
    cache = _duckdb_cache_mib(w)
    assert size_mib > 32, size_mib  # the report is well over the limit ...
    assert cache <= 16, (cache, size_mib)  # ... its cache is not (without a limit it holds the whole file)
    w.close(exit_code=0)
    assert w.failed is None
    # the finishing queries ran without the limit and the report is whole
    import duckdb

    con = duckdb.connect(str(tmp_path / "r.gpuscope"), read_only=True)
    assert con.execute("SELECT count(*), count(DISTINCT start_ns) FROM torch_op").fetchall()[0] == (3_000_000,) * 2
    con.close()


def test_ingesting_keeps_nothing_per_row(tmp_path: Path) -> None:
    """Python memory after 20 chunks is what it was after 5: names are interned once, rows go to DuckDB."""
    spool = tmp_path / "spool"
    spool.mkdir()
    sw = SpoolWriter(str(spool), pid=4242)
    w = ReportWriter(tmp_path / "r.gpuscope")
    rng = np.random.default_rng(0)

    def chunk(i: int) -> None:
        t0 = i * 100_000_000
        ops = [(t0 + k * 10_000, t0 + k * 10_000 + 5_000, 1, NAMES[int(rng.integers(0, 40))], k,
                "[[32,64],[64,64]]", '["float32","float32"]', "[[32,64]]", "{}") for k in range(2_000)]
        ranges = [(t0 + k * 100_000, t0 + k * 100_000 + 50_000, 1, i * 1_000 + k, "torch", f"Linear.{k % 8}",
                   "range", "torch", "forward", None) for k in range(200)]
        sw.write(rows={"torch_op": ops, "range": ranges})
        w.ingest(str(spool))

    for i in range(5):
        chunk(i)
    gc.collect()
    tracemalloc.start()
    strings = len(w._string_list)
    base = tracemalloc.get_traced_memory()[0]
    for i in range(5, 20):
        chunk(i)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert len(w._string_list) == strings  # no new strings for the same names
    assert not w._ranges._open and not w._ranges._early_end
    # 30,000 operators and 3,000 ranges more: any object kept per row would be megabytes
    assert grown < 200_000, grown
    assert w.records == 20 * 2_200
    w.close(exit_code=0)


def test_the_writer_uses_a_few_threads_whatever_the_machine(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """DuckDB's default is every core of the machine: beside a program on a 64-core host the ingest
    cache was split 64 ways, and the report could not be finished (out of memory at the cache's limit)."""
    import gpuscope.trace.writer as writer_mod

    monkeypatch.setattr(writer_mod, "threads", lambda: 64)
    w = ReportWriter(tmp_path / "r.gpuscope")
    assert int(w.con.execute("SELECT current_setting('threads')").fetchall()[0][0]) == writer_mod.WRITER_THREADS
    w.close(exit_code=0)
    monkeypatch.setattr(writer_mod, "threads", lambda: 1)
    w = ReportWriter(tmp_path / "one.gpuscope")
    assert int(w.con.execute("SELECT current_setting('threads')").fetchall()[0][0]) == 1
    w.close(exit_code=0)
