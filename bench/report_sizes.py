"""Bytes on disk of a synthetic report: per kernel record, for the kernel table, per kernel column.

The kernel table's share is the file minus the same report with no kernel rows (same strings and
launch configurations); a column's share is its size stored alone in a fresh DuckDB file, minus
that of an empty one, with the compressions DuckDB chose for it in the report.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import duckdb

from gpuscope.trace import schema
from synthetic_report import Generation, make_report


@dataclass
class ColumnSize:
    column: str
    compression: str
    bytes: int
    bytes_per_record: float


@dataclass
class Sizes:
    file_bytes: int
    empty_report_bytes: int
    kernel_table_bytes: int
    bytes_per_record: float
    kernel_bytes_per_record: float
    used_blocks: int
    free_blocks: int
    block_size: int
    columns: list[ColumnSize] = field(default_factory=list)


def measure_sizes(gen: Generation, breakdown: bool, log: Callable[[str], None]) -> Sizes:
    """File size per record, the kernel table's share, and with ``breakdown`` each kernel column's."""
    report = Path(gen.path)
    con = duckdb.connect(gen.path, read_only=True)
    try:
        block_size, used, free = con.execute(
            "SELECT block_size, used_blocks, free_blocks FROM pragma_database_size()").fetchone()  # type: ignore[misc]
        segments = con.execute(
            "SELECT column_name, compression, count(*) AS n FROM pragma_storage_info('kernel') "
            "WHERE segment_type <> 'VALIDITY' GROUP BY ALL ORDER BY column_name, n DESC").fetchall()
    finally:
        con.close()
    compressions: dict[str, list[str]] = {}
    for col, comp, n in segments:
        compressions.setdefault(col, []).append(f"{comp} ({n})")

    def per_record(n: int) -> float:
        return n / gen.records if gen.records else 0.0

    columns: list[ColumnSize] = []
    with tempfile.TemporaryDirectory(prefix="stats_bench_") as tmp:
        empty = Path(tmp) / "empty.gpuscope"
        make_report(empty, 0, gen.names, gen.seed, zipf=gen.zipf)
        empty_bytes = empty.stat().st_size
        for col in schema.columns("kernel") if breakdown else []:
            log(f"  column {col}")
            b = _column_bytes(report, col, Path(tmp))
            columns.append(ColumnSize(col, ", ".join(compressions.get(col, ["?"])), b, per_record(b)))
    file_bytes = report.stat().st_size
    return Sizes(
        file_bytes=file_bytes, empty_report_bytes=empty_bytes, kernel_table_bytes=file_bytes - empty_bytes,
        bytes_per_record=per_record(file_bytes), kernel_bytes_per_record=per_record(file_bytes - empty_bytes),
        used_blocks=int(used), free_blocks=int(free), block_size=int(block_size), columns=columns,
    )


def _column_bytes(report: Path, column: str, scratch: Path) -> int:
    """On-disk bytes of one kernel column stored alone in a fresh DuckDB file (minus an empty one)."""
    sizes = []
    for limit in ("", " LIMIT 0"):
        out = scratch / f"column_{column}.duckdb"
        con = duckdb.connect(str(out))
        try:
            con.execute(f"ATTACH '{report}' AS src (READ_ONLY)")
            con.execute(f"CREATE TABLE t AS SELECT {column} FROM src.kernel{limit}")
            con.execute("DETACH src")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        sizes.append(out.stat().st_size)
        out.unlink()
    return sizes[0] - sizes[1]
