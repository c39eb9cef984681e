"""Reading a report file: validation, SQL access and DataFrame accessors for notebooks."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import uuid
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ..errors import ReportError
from . import schema

if TYPE_CHECKING:
    import pandas as pd

_KERNELS = """
    SELECT k.start_ns, k.end_ns, k.end_ns - k.start_ns AS duration_ns, n.value AS name,
           m.value AS mangled_name, k.pid, k.device_id, k.context_id, k.stream_id,
           k.correlation_id, k.queued_ns, k.submitted_ns, k.graph_id, k.graph_node_id,
           c.grid_x, c.grid_y, c.grid_z, c.block_x, c.block_y, c.block_z,
           c.cluster_x, c.cluster_y, c.cluster_z, c.registers_per_thread,
           c.static_shared_memory, c.dynamic_shared_memory, c.local_memory_per_thread,
           c.local_memory_total, c.shared_memory_executed, c.launch_type
    FROM kernel k
    JOIN kernel_config c ON c.id = k.config_id
    JOIN string n ON n.id = c.name_id
    JOIN string m ON m.id = c.mangled_id
    ORDER BY k.start_ns"""
_API_CALLS = """
    SELECT a.start_ns, a.end_ns, a.end_ns - a.start_ns AS duration_ns, s.value AS name, a.domain,
           a.cbid, a.pid, a.tid, a.correlation_id, a.return_value
    FROM api_call a JOIN string s ON s.id = a.name_id
    ORDER BY a.start_ns"""


# What DuckDB raises when a report's data blocks cannot be read (truncated or damaged file).
DAMAGED = (duckdb.Error,)
# DuckDB's memory while reading a report: past it, sorts, joins and the analyses' temporary tables
# spill to a private temporary folder, so that reading a report of tens of millions of rows stays
# within a machine's memory. GPUSCOPE_MEMORY_LIMIT (a DuckDB size, such as 4GB) sets it.
MEMORY_LIMIT = "1GB"
_SIZE = re.compile(r"\s*\d+(\.\d+)?\s*([kmgt]i?b|b|bytes)?\s*", re.IGNORECASE)  # what DuckDB takes as a size


class Report:
    """An opened report file. Query it with :meth:`sql`, or get tables as DataFrames."""

    def __init__(self, path: Path, con: duckdb.DuckDBPyConnection, meta: dict[str, Any]) -> None:
        self.path = path
        self.con = con
        self.meta = meta
        self._spill: str | None = None

    @classmethod
    def open(cls, path: str | Path) -> Report:
        """Open and validate ``path``; raise ReportError with the reason if it is not readable."""
        p = Path(path)
        if not p.exists():
            raise ReportError(p, "no such report file")
        if p.is_dir():
            raise ReportError(p, "is a directory, not a report file")
        try:
            con = duckdb.connect(str(p), read_only=True)
        except duckdb.Error as exc:
            text = _first_line(exc)
            if "lock" in text.lower():
                raise ReportError(p, "is being written (a gpuscope profile run still holds it); read it when "
                                     "that run has ended") from None
            raise ReportError(p, f"not a gpuscope report, or a damaged one ({text})") from None
        try:
            report = cls(p, con, _meta(p, con))
            report._bound_memory()
            return report
        except BaseException:
            con.close()
            raise

    def _bound_memory(self) -> None:
        limit = os.environ.get("GPUSCOPE_MEMORY_LIMIT") or MEMORY_LIMIT
        if not _SIZE.fullmatch(limit):
            raise ReportError(self.path, f"GPUSCOPE_MEMORY_LIMIT={limit!r} is not a size such as 4GB")
        try:
            self.con.execute(f"SET memory_limit = '{limit}'")
        except duckdb.Error as exc:  # a size, but below what the open report already holds
            raise ReportError(self.path, f"opening it needs more than the memory allowed ({limit}): set "
                                         f"GPUSCOPE_MEMORY_LIMIT higher, such as 4GB ({_first_line(exc)})") from None
        # DuckDB makes the folder when it first spills; it goes on close, or when the report is
        # collected or the interpreter ends if the report was never closed
        self._spill = os.path.join(tempfile.gettempdir(), f"gpuscope-spill-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        self.con.execute(f"SET temp_directory = '{self._spill}'")
        weakref.finalize(self, shutil.rmtree, self._spill, ignore_errors=True)

    def close(self) -> None:
        self.con.close()
        if self._spill:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None

    def __enter__(self) -> Report:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- facts --------------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        """False when the profiler itself was stopped before it could finish the file."""
        return self.meta.get("status") == "complete"

    def not_recorded(self) -> dict[str, str]:
        """Return what this report lacks by choice of collectors, with the option that records it."""
        return dict(self.meta.get("not_recorded") or {})

    def count(self, table: str) -> int:
        """Return the number of rows of ``table``."""
        return int(self.sql(f"SELECT count(*) FROM {table}")[0][0])

    def sql(self, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a SQL query on the report and return its rows."""
        try:
            return self.con.execute(query, params or []).fetchall()
        except DAMAGED as exc:
            raise self.damaged(exc) from None

    def damaged(self, exc: BaseException) -> ReportError:
        """Return the error that says this report's data cannot be read (or, where DuckDB ran out
        of the memory it may use, that and how to give it more)."""
        if isinstance(exc, duckdb.OutOfMemoryException):
            limit = os.environ.get("GPUSCOPE_MEMORY_LIMIT") or MEMORY_LIMIT
            return ReportError(self.path, f"reading it needed more than the memory allowed ({limit}): set "
                                          f"GPUSCOPE_MEMORY_LIMIT higher, such as 4GB ({_first_line(exc)})")
        return ReportError(self.path, f"damaged or truncated report ({_first_line(exc)})")

    # -- DataFrames -------------------------------------------------------------------------
    def df(self, query: str, params: list[Any] | None = None) -> pd.DataFrame:
        """Run a SQL query on the report and return a pandas DataFrame."""
        try:
            return self.con.execute(query, params or []).df()
        except DAMAGED as exc:
            raise self.damaged(exc) from None

    def df_shared(self, query: str) -> pd.DataFrame:
        """:meth:`df`, for results of millions of rows whose text repeats (kernel, operator and range
        names): the rows are read in batches and each distinct text is one Python object shared by
        its rows, not one per row (hundreds of bytes each). Returns the same frame as :meth:`df`."""
        import numpy as np
        import pandas as pd

        try:
            res = self.con.execute(query)
            parts = []
            texts: dict[str, str] = {}
            while not (chunk := res.fetch_df_chunk(64)).empty or not parts:
                for column in chunk.columns:
                    values = chunk[column]
                    if values.dtype == object or pd.api.types.is_string_dtype(values.dtype):
                        codes, uniques = pd.factorize(values)
                        shared = np.array([texts.setdefault(u, u) for u in uniques] + [None], dtype=object)
                        chunk[column] = pd.Series(shared[codes], index=values.index, dtype=values.dtype)
                parts.append(chunk)
                if chunk.empty:
                    break
        except DAMAGED as exc:
            raise self.damaged(exc) from None
        return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]

    def kernels(self) -> pd.DataFrame:
        """Every kernel with its name, launch configuration and times (ns), by start time."""
        return self.df(_KERNELS)

    def api_calls(self) -> pd.DataFrame:
        """Every recorded CUDA runtime and driver API call, by start time."""
        return self.df(_API_CALLS)

    def memcpys(self) -> pd.DataFrame:
        """Every memory copy, with direction, memory kinds (pageable or pinned) and bytes."""
        return self.df("SELECT *, end_ns - start_ns AS duration_ns FROM memcpy ORDER BY start_ns")

    def memsets(self) -> pd.DataFrame:
        """Every memset."""
        return self.df("SELECT *, end_ns - start_ns AS duration_ns FROM memset ORDER BY start_ns")

    def syncs(self) -> pd.DataFrame:
        """Every synchronization CUPTI recorded (stream, context, event)."""
        return self.df("SELECT *, end_ns - start_ns AS duration_ns FROM sync ORDER BY start_ns")

    def ranges(self) -> pd.DataFrame:
        """Ranges and marks (``kind``) of NVTX and of gpuscope's own annotations and PyTorch hooks
        (``source``), with name, domain and category; ``end_ns`` is NULL if a range never ended."""
        return self.df(
            """SELECT r.start_ns, r.end_ns, r.end_ns - r.start_ns AS duration_ns, n.value AS name,
                      d.value AS domain, r.kind, r.source, r.category, r.color, r.pid, r.tid, r.id
               FROM nvtx_range r JOIN string n ON n.id = r.name_id JOIN string d ON d.id = r.domain_id
               ORDER BY r.start_ns"""
        )

    def devices(self) -> pd.DataFrame:
        """Properties of the GPUs the program used."""
        return self.df("SELECT DISTINCT * EXCLUDE (pid) FROM device ORDER BY id")

    def processes(self) -> pd.DataFrame:
        """The profiled processes."""
        return self.df("SELECT * FROM process ORDER BY start_ns")

    def diagnostics(self) -> pd.DataFrame:
        """Warnings and errors the collectors reported during the run."""
        return self.df("SELECT * FROM diagnostic ORDER BY ts_ns")


def _meta(p: Path, con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Read and check the report's ``meta`` table, and make an older schema readable; return it."""
    try:
        rows = con.execute("SELECT key, value FROM meta").fetchall()
    except duckdb.Error:
        hint = ""
        if not p.with_name(p.name + ".wal").exists() and p.stat().st_size <= 1 << 16:
            hint = f"; if it was copied while being written, copy {p.name}.wal beside it too"
        raise ReportError(p, f"not a gpuscope report (it has no meta table){hint}") from None
    meta: dict[str, Any] = {}
    for key, value in rows:
        try:
            meta[str(key)] = json.loads(value)
        except (TypeError, ValueError):
            raise ReportError(p, f"damaged report (meta value of {str(key)[:40]!r} is not JSON)") from None
    if meta.get("format") != schema.FORMAT_NAME:
        raise ReportError(p, "not a gpuscope report (unknown format)")
    version = meta.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ReportError(p, f"damaged report (schema version {str(version)[:20]!r} is not a version number)")
    if version > schema.SCHEMA_VERSION:
        raise ReportError(p, f"report schema version {version} is newer than this gpuscope reads "
                             f"(up to {schema.SCHEMA_VERSION}); upgrade gpuscope")
    try:
        db = con.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        for stmt in schema.upgrade_statements(version, db):
            con.execute(stmt)
    except duckdb.Error as exc:
        raise ReportError(p, f"damaged report ({_first_line(exc)})") from None
    return meta


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
