"""Where an importer puts its rows: a new report file filled in batches, whole or absent.

Rows are collected per table, as tuples in the table's column order (:meth:`ReportSink.add`) or as
blocks of columns (:meth:`ReportSink.add_block`), and inserted into DuckDB every :data:`BATCH` rows, in
the order they came, so an import holds one batch per table in memory whatever the size of its source. The report is written under a hidden temporary name and renamed into place only when the
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


def _wrap_unsigned(out: Any) -> Any:
    """An unsigned 32-bit id (a stream of -1 written as 4294967295) as the signed value it stands for."""
    out[(out >= 2**31) & (out < 2**32)] -= 2**32
    return out


def _column(values: tuple[Any, ...], sql_type: str) -> Any:
    """Values of one column as an array DuckDB reads without loss: exact 64-bit integers (nullable
    where a value is None; a float column would round nanosecond times), floats or objects."""
    if sql_type in ("BIGINT", "INTEGER"):
        try:
            out = np.array(values, dtype=np.int64)
        except (TypeError, ValueError):
            out = pd.array(values, dtype="Int64")
        return _wrap_unsigned(out) if sql_type == "INTEGER" else out
    if sql_type == "DOUBLE":
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    return np.array(values, dtype=object)


def _as_part(col: Any) -> Any:
    """A column of :func:`_column` as a part of :func:`_block_column`."""
    if isinstance(col, pd.api.extensions.ExtensionArray):
        return col.to_numpy(dtype=np.int64, na_value=0), np.asarray(col.isna())
    return col


def _block_column(parts: list[Any], sizes: list[int], sql_type: str) -> Any:
    """One column of several blocks joined: each part an array, a (values, mask) pair of a nullable
    integer column (mask None: no nulls), or one value for all the block's rows."""
    if sql_type in ("BIGINT", "INTEGER"):
        values, masks = [], []
        for part, n in zip(parts, sizes):
            if isinstance(part, tuple):
                v, m = part
            elif isinstance(part, np.ndarray):
                v, m = part, None
            elif part is None:
                v, m = np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
            else:
                v, m = np.full(n, part, dtype=np.int64), None
            values.append(v.astype(np.int64, copy=False))
            masks.append(np.zeros(n, dtype=bool) if m is None else m)
        data = np.concatenate(values)
        if sql_type == "INTEGER":
            data = _wrap_unsigned(data)
        mask = np.concatenate(masks)
        return pd.arrays.IntegerArray(data, mask) if mask.any() else data
    arrays = []
    for part, n in zip(parts, sizes):
        if isinstance(part, np.ndarray):
            arrays.append(part)
        elif sql_type == "DOUBLE":
            arrays.append(np.full(n, np.nan if part is None else part, dtype=np.float64))
        else:
            a = np.empty(n, dtype=object)
            a[:] = [part] * n
            arrays.append(a)
    out = np.concatenate(arrays)
    if sql_type == "DOUBLE":
        return out.astype(np.float64)
    return out


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
        self._blocks: dict[str, list[tuple[dict[str, Any], int]]] = {}
        self._queued: dict[str, int] = {}
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
        if len(rows) + self._queued.get(table, 0) >= BATCH:
            self.flush(table)

    def add_block(self, table: str, columns: dict[str, Any], rows: int) -> None:
        """Queue ``rows`` rows of ``table`` given as columns (see :func:`_block_column`); the table's
        columns not named are NULL."""
        self._rows_to_block(table)
        self._blocks.setdefault(table, []).append((columns, rows))
        self._queued[table] = self._queued.get(table, 0) + rows
        if self._queued[table] >= BATCH:
            self.flush(table)

    def _rows_to_block(self, table: str) -> None:
        rows = self._rows.get(table)
        if rows:
            types = _types(table)
            cols = {c: _as_part(_column(v, types[c])) for c, v in zip(self._columns[table], zip(*rows))}
            self._blocks.setdefault(table, []).append((cols, len(rows)))
            self._queued[table] = self._queued.get(table, 0) + len(rows)
            rows.clear()

    def flush(self, table: str | None = None) -> None:
        """Insert the queued rows of ``table`` (of every table when None)."""
        for name in [table] if table else list(self._rows.keys() | self._blocks.keys()):
            self._rows_to_block(name)
            blocks = self._blocks.get(name)
            if not blocks:
                continue
            types = _types(name)
            sizes = [n for _, n in blocks]
            named = [c for c in types if any(b.get(c) is not None for b, _ in blocks)]  # the rest: NULL
            frame = pd.DataFrame({c: _block_column([b.get(c) for b, _ in blocks], sizes, types[c]) for c in named})
            self.writer._store_strings()
            self.writer._insert(name, frame)
            self.counts[name] = self.counts.get(name, 0) + sum(sizes)
            blocks.clear()
            self._queued[name] = 0

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
