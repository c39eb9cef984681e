"""Writes the report file from spool chunks, while the profiled program runs.

Runs in the launcher, never in the profiled process: decoding, demangling, interning and the
database writes all happen here. Each ingested chunk is committed to the DuckDB file (its
write-ahead log makes it durable) and then deleted from the spool.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pandas as pd

from ..errors import GpuscopeError
from ..safe_text import storable
from ..spool import Chunk, ready_chunks
from ..version import __version__
from . import anchor_log, decode, memory_counters, memory_totals, schema, trim
from .demangle import demangle
from .range_log import LoggedRanges
from .report_connection import threads
from .ranges import RangeBuilder

if TYPE_CHECKING:
    from .outputs import PartialReport

Diagnostic = tuple[int, str, str]  # pid, level, message

# DuckDB keeps every block it has written in its cache, up to its memory limit (80% of RAM by
# default), so without a limit the launcher's memory grows with the report over a long run (about
# one byte per byte of report). Appending needs only the blocks being filled: the cache is held to
# this while chunks are ingested, and released for the finishing queries (trimming, the checkpoint).
INGEST_MEMORY = "64MB"
WRITER_THREADS = 2

# Rows that collectors in the program send with text where the table holds a string id: the
# positions (in the row as sent, without ``pid``) of the values to intern.
INTERNED_FIELDS: dict[str, tuple[int, ...]] = {
    "torch_op": (3,),  # start_ns, end_ns, tid, name, ...
    "sync_site": (3,),  # start_ns, end_ns, tid, api_name, ...
    "launch_call": (3,),
    "module_class": (0, 1),  # a module's qualified name, its class
}


@dataclass
class _Process:
    """What the writer knows of one profiled process's chunks."""

    next_seq: int = 0
    local_to_global: list[int] = field(default_factory=lambda: [0])
    dtypes: dict[str, Any] = field(default_factory=dict)
    symbols: dict[tuple[str, int], int] = field(default_factory=dict)


class ReportWriter:
    """Creates a report file and fills it from spool chunks.

    With ``partial`` (a :class:`PartialReport` for ``path``), the file is written under a name of its
    own and moved to ``path`` by :meth:`close`; ``unplaced`` says why, if it could not be.
    ``summarize`` is called with the finished file's name once the writer has closed it, before it is
    moved (it stores the stats tables in it); it returns None or why it could not (``unsummarized``).
    """

    def __init__(self, path: Path, memory_limit: str | None = INGEST_MEMORY,
                 partial: PartialReport | None = None,
                 summarize: Callable[[Path], str | None] | None = None) -> None:
        self.path = path
        self.partial = partial
        self.unplaced: str | None = None
        self.summarize = summarize
        self.unsummarized: str | None = None
        self._closed = False
        self._stage = "starting"  # the step of finishing the report that runs (said where one fails)
        # A few threads: the writer runs beside the program, and DuckDB's default (every core of the
        # machine, not those this process may use) splits the small ingest cache between them.
        self.con = duckdb.connect(str(path) if partial is None else partial.database,
                                  config={"threads": min(WRITER_THREADS, threads())})
        self.con.execute("SET enable_progress_bar = false")
        if memory_limit:
            self.con.execute(f"SET memory_limit = '{memory_limit}'")
        for stmt in schema.create_statements():
            self.con.execute(stmt)
        self._strings: dict[str, int] = {}
        self._string_list: list[str] = []
        self._stored_strings = 0
        self._configs: dict[tuple[int, ...], int] = {}
        self._procs: dict[int, _Process] = {}
        self._ranges = RangeBuilder()
        self._logged = LoggedRanges(self.intern)  # PyTorch module calls, paired here
        self.records = 0
        # Set when the report file cannot be written any further (a full disk): what was committed
        # before stays (DuckDB's log), later chunks are counted and deleted.
        self.failed: str | None = None
        self.checkpoint_failed = False  # only the last step failed: every record is in the .wal
        self.lost_chunks = 0
        self.intern("")
        self.set_meta(
            format=schema.FORMAT_NAME,
            schema_version=schema.SCHEMA_VERSION,
            gpuscope_version=__version__,
            status="recording",
        )

    # -- meta and strings -----------------------------------------------------------------
    def set_meta(self, **items: Any) -> None:
        """Store key/value pairs in ``meta`` (values as JSON, text made valid UTF-8)."""
        for key, value in items.items():
            self.con.execute(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)", [storable(key), json.dumps(_storable_json(value))]
            )

    def intern(self, value: str) -> int:
        """Return the report-wide id of ``value`` in the ``string`` table (text that is not valid
        UTF-8 is stored with its odd bytes escaped, see :func:`gpuscope.safe_text.storable`)."""
        gid = self._strings.get(value)
        if gid is None:
            text = storable(value) if isinstance(value, str) else value
            gid = self._strings.get(text)
            if gid is None:
                gid = len(self._string_list)
                self._strings[text] = gid
                self._string_list.append(text)
            self._strings[value] = gid
        return gid

    def _store_strings(self) -> None:
        """Insert the strings interned since the last call, in one go."""
        new = self._string_list[self._stored_strings :]
        if new:
            ids = range(self._stored_strings, len(self._string_list))
            self._insert("string", pd.DataFrame({"id": ids, "value": new}))
            self._stored_strings = len(self._string_list)

    # -- ingest -----------------------------------------------------------------------------
    def ingest(self, spool_dir: str, final: bool = False) -> list[Diagnostic]:
        """Ingest every chunk that is ready, in order per process; return new diagnostics.

        With ``final``, a process whose chunk sequence has a hole (a writer that died mid-chunk)
        is ingested past the hole.
        """
        found: dict[int, dict[int, str]] = {}
        for pid, seq, path in ready_chunks(spool_dir):
            found.setdefault(pid, {})[seq] = path
        diagnostics: list[Diagnostic] = []
        for pid in sorted(found):
            proc = self._procs.setdefault(pid, _Process())
            chunks = found[pid]
            order = sorted(chunks) if final else _consecutive(chunks, proc.next_seq)
            for seq in order:
                path = chunks[seq]
                if self.failed is None:
                    diagnostics += self._ingest_file(pid, proc, seq, path)
                else:
                    self.lost_chunks += 1
                os.unlink(path)
                proc.next_seq = seq + 1
        return diagnostics

    def _ingest_file(self, pid: int, proc: _Process, seq: int, path: str) -> list[Diagnostic]:
        """Ingest one chunk file; a failure to write the report itself stops all ingestion."""
        try:
            with open(path, "rb") as fh:
                chunk = Chunk.from_bytes(fh.read())
        except Exception as exc:  # noqa: BLE001  (a damaged chunk loses its records, no more)
            return [self._problem(pid, f"unreadable chunk {seq}: {_text(exc)}")]
        try:
            diagnostics = self._ingest_chunk(proc, chunk)
            self._store_strings()
        except Exception as exc:  # noqa: BLE001
            if not _fatal(exc):
                raise
            self.failed = _text(exc)
            self.lost_chunks += 1
            return [(pid, "error", f"the report cannot be written any further ({self.failed}): it keeps what "
                                   "was stored until now; later records are lost")]
        return diagnostics

    def _ingest_chunk(self, proc: _Process, chunk: Chunk) -> list[Diagnostic]:
        for local, value in chunk.strings:
            while len(proc.local_to_global) <= local:
                proc.local_to_global.append(0)
            proc.local_to_global[local] = self.intern(value)
        proc.dtypes.update(chunk.dtypes)
        proc.symbols.update(chunk.symbols)
        problems = []
        for struct, blob in chunk.records.items():
            try:
                self._ingest_records(chunk.pid, proc, struct, blob)
            except Exception as exc:  # noqa: BLE001  (keep recording the rest)
                if _fatal(exc):
                    raise
                problems.append(self._problem(chunk.pid, f"could not store {struct} records: {_text(exc)}"))
        try:
            return problems + self._ingest_rows(chunk.pid, chunk.rows)
        except Exception as exc:  # noqa: BLE001
            if _fatal(exc):
                raise
            return problems + [self._problem(chunk.pid, f"could not store collector rows: {_text(exc)}")]

    def record_problem(self, pid: int, message: str) -> None:
        """Store a failure seen by the launcher as an error diagnostic of the report."""
        self._problem(pid, message)

    def _problem(self, pid: int, message: str) -> Diagnostic:
        """Record a failure of the writer itself as a diagnostic of the report."""
        message = storable(message)
        self.con.execute(
            "INSERT INTO diagnostic VALUES (NULL, ?, 'error', ?)", [pid, message]
        )
        return (pid, "error", message)

    def _ingest_records(self, pid: int, proc: _Process, struct: str, blob: bytes) -> None:
        table = decode.table_for(struct)
        dt = proc.dtypes.get(struct)
        if table is None or dt is None or not blob:
            return
        recs = np.frombuffer(blob, dtype=dt)
        local = np.asarray(proc.local_to_global, dtype=np.int64)

        def resolve(space: str, values: np.ndarray) -> np.ndarray:
            uniq, inverse = np.unique(values, return_inverse=True)
            ids = np.array(
                [local[proc.symbols.get((space, int(v)), 0)] for v in uniq], dtype=np.int64
            )
            return ids[inverse]

        cols = decode.decode(table, recs, resolve)
        if table == "nvtx_event":
            self._insert_ranges(self._ranges.add(pid, cols))
            return
        if table == "kernel":
            cols = self._intern_configs(cols)
        elif table == "device":
            cols["name"] = np.array([self._string_list[i] for i in cols.pop("name_id")], dtype=object)
        cols["pid"] = np.full(len(recs), pid, dtype=np.int64)
        self._insert(table, pd.DataFrame(cols))

    def _insert_ranges(self, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            frame = pd.DataFrame(rows, columns=schema.columns("nvtx_range"))
            frame["end_ns"] = frame["end_ns"].astype("Int64")
            self._insert("nvtx_range", frame)

    def _intern_configs(self, cols: dict[str, Any]) -> dict[str, Any]:
        keys = ("mangled_id", *decode.KERNEL_CONFIG_FIELDS)
        matrix = np.stack([np.asarray(cols.pop(k), dtype=np.int64) for k in keys], axis=1)
        uniq, inverse = np.unique(matrix, axis=0, return_inverse=True)
        ids = np.empty(len(uniq), dtype=np.int64)
        new_rows = []
        for i, row in enumerate(uniq):
            key = tuple(int(v) for v in row)
            cid = self._configs.get(key)
            if cid is None:
                cid = len(self._configs)
                self._configs[key] = cid
                mangled = self._string_list[key[0]]
                new_rows.append((cid, self.intern(demangle(mangled)), *key))
            ids[i] = cid
        if new_rows:
            names = ["id", "name_id", *keys]
            self._insert("kernel_config", pd.DataFrame(new_rows, columns=names))
        cols["config_id"] = ids[np.asarray(inverse).reshape(-1)]
        return cols

    def _ingest_rows(self, pid: int, rows: dict[str, list[tuple[Any, ...]]]) -> list[Diagnostic]:
        diagnostics: list[Diagnostic] = []
        self._logged.name_kinds(pid, rows.get("range_kind", ()))  # before the entries that refer to them
        for table, items in rows.items():
            if table == "range":
                self._insert_python_ranges(pid, items)
                continue
            if table == "range_log":
                for frame in self._logged.frames(pid, items):
                    self._insert("nvtx_range", frame)
                continue
            if table == "anchor_log":
                self._insert("launch_call", anchor_log.frame(pid, items, self.intern(anchor_log.ANCHOR_API)))
                continue
            if table == "cpu_frame":  # the sampler sends file and function names as text
                items = [(fid, self.intern(file), line, self.intern(func)) for fid, file, line, func in items]
            if table in INTERNED_FIELDS:
                items = [_interned(row, INTERNED_FIELDS[table], self.intern) for row in items]
            if table == "process_end":
                for (end_ns,) in items:
                    self.con.execute("UPDATE process SET end_ns = ? WHERE pid = ?", [end_ns, pid])
                continue
            if table not in schema.TABLES:
                continue
            if table in ("capture_window", "torch_op_window"):  # sent when a window opens, again when it closes
                items = list({row[0]: row for row in items}.values())
                for row in items:
                    self.con.execute(f"DELETE FROM {table} WHERE pid = ? AND start_ns = ?", [pid, row[0]])
            if table == "rank":  # sent again when torch.distributed knows better: the last one stands
                items = items[-1:]
                self.con.execute("DELETE FROM rank WHERE pid = ?", [pid])
            names = [c for c in schema.columns(table) if c != "pid"]
            frame = pd.DataFrame(list(items), columns=names)
            frame["pid"] = pid
            self._insert(table, frame)
            if table == "diagnostic":
                diagnostics += [(pid, level, msg) for _, level, msg in items]
        return diagnostics

    def add_host_counters(self, rows: list[tuple[Any, ...]]) -> None:
        """Store host, process and GPU counters (times on CLOCK_MONOTONIC until ``close``)."""
        if rows:
            self._insert("host_counter", pd.DataFrame(rows, columns=["ts_ns", "pid", "name", "value"]))

    def _insert_python_ranges(self, pid: int, rows: list[tuple[Any, ...]]) -> None:
        """Store ranges recorded by Python code in the program (names not yet interned)."""
        frame = pd.DataFrame(rows, columns=["start_ns", "end_ns", "tid", "id", "domain", "name", "kind",
                                            "source", "category", "color"])
        frame["domain_id"] = [self.intern(v) for v in frame.pop("domain")]
        frame["name_id"] = [self.intern(v) for v in frame.pop("name")]
        frame["end_ns"] = frame["end_ns"].astype("Int64")
        frame["pid"] = pid
        self._insert("nvtx_range", frame)

    def _insert(self, table: str, frame: pd.DataFrame) -> None:
        if frame.empty:
            return
        if table not in ("string", "kernel_config"):
            self.records += len(frame)
        self.con.register("_incoming", frame)
        try:
            cols = ", ".join(f'"{c}"' for c in frame.columns)
            try:
                self.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _incoming")
            except duckdb.OutOfMemoryException:
                # the cache limit is a bound on what is kept, never a reason to lose records
                self.con.execute("RESET memory_limit")
                self.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _incoming")
            except (duckdb.InvalidInputException, UnicodeError):
                # text that is not valid UTF-8 (a name made of a file name's bytes): stored escaped
                cleaned = _storable_frame(frame)
                if cleaned is None:
                    raise
                self.con.unregister("_incoming")
                self.con.register("_incoming", cleaned)
                self.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _incoming")
        finally:
            self.con.unregister("_incoming")

    # -- end ----------------------------------------------------------------------------------
    def pids(self) -> list[int]:
        """Return the processes that delivered chunks."""
        return list(self._procs)

    def close(self, **meta: Any) -> None:
        """Store the final meta items, mark the report complete and write it out. When the file cannot
        be written (``failed`` is set, or becomes set here), close it as it is, without raising.
        A second call does nothing."""
        if self._closed:
            return
        if self.failed is None:
            try:
                self._finish(meta)
            except Exception as exc:  # noqa: BLE001
                self.failed = _text(exc)
                if _fatal(exc):
                    self.checkpoint_failed = "checkpoint" in str(exc).lower()
                else:  # the records are stored; the report stays 'recording' and says why
                    try:
                        self._problem(0, f"the report could not be finished ({self._stage}): {self.failed}")
                    except Exception:  # noqa: BLE001,S110  (said by the caller anyway)
                        pass
        try:
            if self.failed is None and self.summarize is not None:
                self.con.close()  # the file is finished: the tables are computed on it as a reader opens it
                self.unsummarized = self.summarize(Path(self.partial.database) if self.partial else self.path)
        finally:
            self.abandon()  # placed whatever computing the tables met

    def abandon(self) -> None:
        """Close the file as it is (``status`` stays ``recording`` unless :meth:`close` finished it) and,
        with ``partial``, move it to its name. A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self.con.close()
        except Exception:  # noqa: BLE001,S110  (a connection DuckDB invalidated; nothing more to save)
            pass
        if self.partial is not None:
            try:
                self.partial.place()
            except GpuscopeError as exc:
                self.unplaced = str(exc)

    def _finish(self, meta: dict[str, Any]) -> None:
        self._stage = "lifting the ingest cache's limit"
        self.con.execute("RESET memory_limit")  # the joins below may need more than appending did
        self._stage = "storing the open ranges"
        self._insert_ranges(self._ranges.unfinished())
        for frame in self._logged.unfinished_frames():
            self._insert("nvtx_range", frame)
        for pid, line in self._logged.said():
            self.con.execute("INSERT INTO diagnostic VALUES (NULL, ?, 'info', ?)", [pid, line])
        for pid, counts in self._logged.counts.items():  # the process's own counts leave the logged ranges out
            for (detail,) in self.con.execute("SELECT detail FROM collector WHERE pid = ? AND name = 'ranges'",
                                              [pid]).fetchall():
                merged = _merged_counts(detail, counts)
                self.con.execute("UPDATE collector SET records = records + ?, detail = ? WHERE pid = ? AND "
                                 "name = 'ranges'", [counts["ranges"], merged, pid])
        self._stage = "storing the names"
        self._store_strings()
        self._stage = "placing the host counters"
        # host counters were taken on CLOCK_MONOTONIC: move them to the session clock
        self.con.execute(
            """UPDATE host_counter SET ts_ns = ts_ns + coalesce(
                   (SELECT clock_offset_ns FROM process ORDER BY start_ns LIMIT 1), 0)"""
        )
        self._stage = "memory totals"
        memory_totals.fill(self.con)  # CUPTI's allocations and frees: their running totals, once all are in
        self._stage = "trimming to the capture windows"
        trimmed = trim.trim(self.con)  # to the capture windows, if a capture range limited the run
        self._stage = "memory counters"
        memory_counters.store(self.con)  # from the trimmed memory events; on the session clock already
        if trimmed:
            meta["capture_trimmed"] = trimmed
        self._stage = "the last meta items and checkpoint"
        self.set_meta(**meta, status="complete")
        self.con.execute("CHECKPOINT")


def _merged_counts(detail: str | None, counts: dict[str, int]) -> str:
    """A collector row's JSON counts with ``counts`` added to them (kept as it is where it is not JSON)."""
    try:
        found = json.loads(detail or "{}")
    except ValueError:
        return detail or ""
    if not isinstance(found, dict):
        return detail or ""
    for key, n in counts.items():
        found[key] = int(found.get(key, 0) or 0) + int(n)
    return json.dumps(found, sort_keys=True)


def _fatal(exc: BaseException) -> bool:
    """Whether ``exc`` means the report file cannot be written (a full disk, a failed write), as opposed
    to records that could not be stored."""
    text = str(exc)
    return (isinstance(exc, (duckdb.FatalException, duckdb.IOException, OSError))
            or "No space left" in text or "database has been invalidated" in text)


def _storable_json(value: Any) -> Any:
    """Return ``value`` (from JSON's types) with every text in it made valid UTF-8."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable(k) if isinstance(k, str) else k: _storable_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_storable_json(v) for v in value]
    return value


def _storable_frame(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Return ``frame`` with the text of its text columns made valid UTF-8, or None if every text
    in it was valid already (the failure was something else)."""
    out = frame.copy()
    changed = False
    for col in out.columns:
        if out[col].dtype != object and not pd.api.types.is_string_dtype(out[col].dtype):
            continue
        values = out[col].tolist()
        fixed = [storable(v) if isinstance(v, str) else v for v in values]
        if any(a is not b for a, b in zip(values, fixed)):
            out[col] = pd.Series(fixed, index=out.index, dtype=object)
            changed = True
    return out if changed else None


def _interned(row: tuple[Any, ...], fields: tuple[int, ...], intern: Any) -> tuple[Any, ...]:
    return tuple(intern(v) if i in fields else v for i, v in enumerate(row))


def _text(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _consecutive(chunks: dict[int, str], start: int) -> list[int]:
    out = []
    seq = start
    while seq in chunks:
        out.append(seq)
        seq += 1
    return out
