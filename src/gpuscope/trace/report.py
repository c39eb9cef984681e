"""Reading a report file: validation, SQL access and DataFrame accessors for notebooks."""

from __future__ import annotations

import contextlib
import json
import re
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ..errors import GpuscopeError, InternalError, ReportError
from . import report_catalog, schema
from .report_connection import (DB, MEMORY_LIMIT, Deadline, check_file, connect, new_spill_folder, remove_spill,
                                seal)
from .report_errors import denied, explain, first_line

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


# What DuckDB raises when a query on a report fails (report_errors.explain says why).
DAMAGED = (duckdb.Error,)


class Report:
    """An opened report file. Query it with :meth:`sql`, or get tables as DataFrames."""

    def __init__(self, path: Path, con: duckdb.DuckDBPyConnection, meta: dict[str, Any]) -> None:
        self.path = path
        self.con = con
        self.meta = meta
        self._spill: str | None = None

    @classmethod
    def open(cls, path: str | Path, writable: list[Path] | None = None, memory: str | None = None) -> Report:
        """Open and check ``path`` and return it; raise ReportError with the reason if it is not a
        readable gpuscope report. ``writable``: folders that queries may write into (an export's
        output); nothing else outside the report is readable or writable by its queries.
        ``memory``: the memory DuckDB may use (default GPUSCOPE_MEMORY_LIMIT, else 1GB); the
        configuration cannot be changed once the report is open."""
        p = Path(path)
        check_file(p)
        spill = new_spill_folder()
        try:
            con = connect(p, spill, writable, memory)
        except duckdb.Error as exc:
            remove_spill(spill)
            raise _unopenable(p, exc) from None
        try:
            report = cls(p, con, _meta(p, con))
            report._spill = spill
            # DuckDB makes the folder when it first spills; it goes on close, or when the report is
            # collected or the interpreter ends if the report was never closed
            weakref.finalize(report, remove_spill, spill)
            return report
        except BaseException:
            con.close()
            remove_spill(spill)
            raise

    def close(self) -> None:
        self.con.close()
        if self._spill:
            remove_spill(self._spill)
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
        """Run a SQL query on the report and return its rows. A query that fails raises a
        GpuscopeError that names the cause: QueryError for an error in the query itself."""
        with self.deadline():
            return self.con.execute(query, params or []).fetchall()

    @contextlib.contextmanager
    def deadline(self) -> Iterator[None]:
        """``with report.deadline():`` runs queries on :attr:`con` within the time limit, and turns
        what DuckDB raises into the error that names its cause (:meth:`damaged`)."""
        watch = Deadline(self.con)
        try:
            with watch:
                yield
        except duckdb.InterruptException:
            if not watch.expired:
                raise KeyboardInterrupt from None
            raise self.damaged(duckdb.InterruptException("time limit"), timed_out=True) from None
        except DAMAGED as exc:
            raise self.damaged(exc) from None

    def damaged(self, exc: BaseException, timed_out: bool = False) -> GpuscopeError:
        """Return the error that says why a query on this report failed: its file damaged, the
        memory or time allowed used up, a disk full, a permission missing, or the query itself."""
        if not isinstance(exc, duckdb.Error):
            return InternalError(f"{type(exc).__name__}: {first_line(exc)}")
        return explain(self.path, exc, timed_out)

    # -- DataFrames -------------------------------------------------------------------------
    def df(self, query: str, params: list[Any] | None = None) -> pd.DataFrame:
        """Run a SQL query on the report and return a pandas DataFrame (errors as :meth:`sql`)."""
        with self.deadline():
            return self.con.execute(query, params or []).df()

    def df_shared(self, query: str) -> pd.DataFrame:
        """:meth:`df`, for results of millions of rows whose text repeats (kernel, operator and range
        names): the rows are read in batches and each distinct text is one Python object shared by
        its rows, not one per row (hundreds of bytes each). Returns the same frame as :meth:`df`."""
        import numpy as np
        import pandas as pd

        with self.deadline():
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


def _unopenable(p: Path, exc: duckdb.Error) -> ReportError:
    """Return the error for a file DuckDB cannot attach: held by a writer, unreadable, or not a
    DuckDB database at all (or one too damaged to open)."""
    text = first_line(exc)
    if isinstance(exc, duckdb.OutOfMemoryException):
        return explain(p, exc)
    if "could not set lock" in text.lower() or "conflicting lock" in text.lower():
        return ReportError(p, "is being written (a gpuscope profile run still holds it); read it when "
                              "that run has ended")
    if denied(exc):
        return ReportError(p, f"permission denied ({text})")
    packed = _compressed(p)
    if packed:
        return ReportError(p, f"is a {packed} file, not a report: decompress it first, then read what it holds")
    newer = _NEWER_STORAGE.search(text)
    if newer:  # a file of a later DuckDB is whole: this one cannot read it
        return ReportError(p, f"was written by a newer DuckDB (storage version {newer.group(1)}) than the "
                              f"one installed here ({duckdb.__version__}), which cannot read it: upgrade "
                              "duckdb (pip install -U duckdb) to read it")
    return ReportError(p, f"not a gpuscope report, or a damaged one ({text})")


# what DuckDB says of a database file of a later storage format than it reads
_NEWER_STORAGE = re.compile(r"database file with version number (\d+), but we can only read versions")


# The first bytes of the compressed files a report travels in (a report is not damaged for being packed).
_PACKED = ((b"\x1f\x8b", "gzip-compressed"), (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
           (b"\xfd7zXZ\x00", "xz-compressed"), (b"BZh", "bzip2-compressed"), (b"PK\x03\x04", "zip"))


def _compressed(p: Path) -> str | None:
    """The kind of compressed file ``p`` is, from its first bytes; None for any other file."""
    try:
        with open(p, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return None
    return next((kind for magic, kind in _PACKED if head.startswith(magic)), None)


def _meta(p: Path, con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Check the report's catalog, read and check its ``meta`` table, make an older schema readable
    and give it empty tables for those it may lack; then seal the connection (report_connection.py).
    Return the meta items."""
    try:
        report_catalog.check(con, DB)
    except report_catalog.CatalogProblem as problem:
        hint = ""
        if str(problem) == "it has no meta table" and not p.with_name(p.name + ".wal").exists() \
                and p.stat().st_size <= 1 << 16:
            hint = f"; if it was copied while being written, copy {p.name}.wal beside it too"
        what = "damaged report" if problem.damaged else "not a gpuscope report"
        raise ReportError(p, f"{what}: {problem}{hint}") from None
    except duckdb.Error as exc:
        raise explain(p, exc) from None
    try:
        rows = con.execute(f"SELECT key, value FROM {DB}.main.meta").fetchall()
    except duckdb.Error as exc:
        raise explain(p, exc) from None
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
        missing = report_catalog.check_tables(con, DB, version)
        seal(con)
        statements = schema.upgrade_statements(version, DB)
        created = {s.split()[3] for s in statements if s.startswith("CREATE TEMP TABLE")}
        statements += [f"CREATE TEMP TABLE {t} ({schema.TABLES[t]}\n)" for t in missing if t not in created]
        for stmt in statements:
            con.execute(stmt)
    except report_catalog.CatalogProblem as problem:
        raise ReportError(p, f"damaged report: {problem}") from None
    except duckdb.Error as exc:
        raise explain(p, exc) from None
    return meta
