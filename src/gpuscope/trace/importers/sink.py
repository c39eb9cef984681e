"""Where an importer puts its rows: a new report file filled in batches, whole or absent.

Rows are collected per table as tuples in the table's column order and inserted into DuckDB every
:data:`BATCH` rows, so an import holds one batch per table in memory whatever the size of its
source. The report is written under a hidden temporary name and renamed into place only when the
importer finishes; on any failure the temporary file is removed, so no partial report is left.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import schema
from ..writer import ReportWriter

BATCH = 200_000



def _types(table: str) -> dict[str, str]:
    """The SQL type of each column of ``table``, from the schema."""
    out = {}
    for line in schema.TABLES[table].split(","):
        parts = line.split()
        if len(parts) >= 2:
            out[parts[0]] = parts[1].upper()
    return out


def _column(values: tuple[Any, ...], sql_type: str) -> Any:
    """Values of one column as an array DuckDB reads without loss: exact 64-bit integers (nullable
    where a value is None; a float column would round nanosecond times), floats or objects."""
    if sql_type in ("BIGINT", "INTEGER"):
        try:
            out = np.array(values, dtype=np.int64)
        except (TypeError, ValueError):
            out = pd.array(values, dtype="Int64")
        if sql_type == "INTEGER":  # an unsigned 32-bit id (a stream of -1 written as 4294967295): as signed
            out[(out >= 2**31) & (out < 2**32)] -= 2**32
        return out
    if sql_type == "DOUBLE":
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    return np.array(values, dtype=object)


class ReportSink:
    """A report being imported: ``add(table, row)``, ``intern(text)``, then ``finish(**meta)``."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.partial = output.with_name(f".{output.name}.partial")
        for p in (self.partial, Path(f"{self.partial}.wal")):
            p.unlink(missing_ok=True)
        # a one-shot conversion with whole-table updates, not a launcher that runs for hours: no cache limit
        self.writer = ReportWriter(self.partial, memory_limit=None)
        self._rows: dict[str, list[tuple[Any, ...]]] = {}
        self._columns: dict[str, list[str]] = {}
        self.counts: dict[str, int] = {}
        self._done = False

    def intern(self, value: str) -> int:
        """Return the report-wide string id of ``value``."""
        return self.writer.intern(value)

    def add(self, table: str, row: tuple[Any, ...], columns: list[str] | None = None) -> None:
        """Queue one row of ``table`` (values in ``columns`` order, by default all of the table's)."""
        rows = self._rows.get(table)
        if rows is None:
            rows = self._rows[table] = []
            self._columns[table] = columns or schema.columns(table)
        rows.append(row)
        if len(rows) >= BATCH:
            self.flush(table)

    def flush(self, table: str | None = None) -> None:
        """Insert the queued rows of ``table`` (of every table when None)."""
        for name in [table] if table else list(self._rows):
            rows = self._rows.get(name)
            if not rows:
                continue
            types = _types(name)
            names = self._columns[name]
            frame = pd.DataFrame({c: _column(v, types[c]) for c, v in zip(names, zip(*rows))})
            self.writer._store_strings()
            self.writer._insert(name, frame)
            self.counts[name] = self.counts.get(name, 0) + len(rows)
            rows.clear()

    def execute(self, sql: str, params: list[Any] | None = None) -> None:
        """Run a statement on the report being written (after flushing every queued row)."""
        self.flush()
        self.writer.con.execute(sql, params or [])

    def finish(self, **meta: Any) -> Path:
        """Insert what is left, write ``meta``, close the file and move it into place; return its path."""
        self.flush()
        self.writer._store_strings()
        self.writer.close(**meta)
        os.replace(self.partial, self.output)
        self._done = True
        return self.output

    def abort(self) -> None:
        """Close and remove the partial report (after a failure)."""
        if self._done:
            return
        try:
            self.writer.con.close()
        finally:
            for p in (self.partial, Path(f"{self.partial}.wal")):
                p.unlink(missing_ok=True)
