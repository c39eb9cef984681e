"""The spool: how records leave the profiled process.

Each profiled process writes numbered chunk files into a spool directory that the launcher owns.
A chunk appears atomically (written under a temporary name, then renamed), so the launcher never
reads half a chunk, and a chunk that was renamed survives a crash of the process that wrote it.
The launcher ingests chunks in order per process and deletes them.

The launcher writes the report under a name of its own and moves it into place at the end. It
leaves that name in the spool (:func:`leave_report`), so that if it is killed, the program, which
outlives it, moves what was ingested into place (:func:`place_left_report`).

This module runs inside the profiled process: standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import pickle
import struct
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

CHUNK_SUFFIX = ".chunk"
REPORT_NOTE = "report.json"  # where the launcher's report is being written, and where it goes
ENDING_PREFIX = "ending-"  # ending-PID: that process has begun to end (see :func:`say_ending`)
MAGIC = b"GSC1"
SPOOL_ENV = "GPUSCOPE_SPOOL"


@dataclass
class Chunk:
    """One unit of records from one process.

    ``strings`` defines new ids of the process-local string table. ``records`` maps a CUPTI record
    struct name (``ActivityKernel11``) to packed structs (bytes, or a list of buffers written one
    after the other), and ``dtypes`` gives the layout of each
    struct name the first time the process sends it. ``symbols`` maps what the structs refer to by
    number to local string ids: ``("ptr", address)`` for CUPTI-owned C strings, ``("runtime",
    cbid)`` and ``("driver", cbid)`` for API names. ``rows`` maps a table to rows produced by
    Python-side collectors (tuples in the table's column order, ``pid`` left out).
    """

    pid: int
    seq: int
    strings: list[tuple[int, str]] = field(default_factory=list)
    records: dict[str, Any] = field(default_factory=dict)  # bytes or any buffer
    dtypes: dict[str, Any] = field(default_factory=dict)
    symbols: dict[tuple[str, int], int] = field(default_factory=dict)
    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)

    def parts(self) -> list[Any]:
        """Return the chunk's file content as a list of buffers (the records are not copied).

        Layout: magic, header length (u32), pickled header, then each record block's bytes.
        """
        blobs = {name: blob if isinstance(blob, list) else [blob] for name, blob in self.records.items()}
        sizes = [(name, sum(memoryview(b).nbytes for b in parts)) for name, parts in blobs.items()]
        header = pickle.dumps(
            (self.pid, self.seq, self.strings, self.dtypes, self.symbols, self.rows, sizes),
            protocol=pickle.HIGHEST_PROTOCOL,
        )
        return [MAGIC, struct.pack("<I", len(header)), header, *(b for parts in blobs.values() for b in parts)]

    @classmethod
    def from_bytes(cls, data: bytes) -> Chunk:
        if data[:4] != MAGIC:
            raise ValueError("not a gpuscope spool chunk")
        (n,) = struct.unpack_from("<I", data, 4)
        pid, seq, strings, dtypes, symbols, rows, sizes = pickle.loads(data[8 : 8 + n])
        records, pos = {}, 8 + n
        for name, size in sizes:
            records[name] = data[pos : pos + size]
            pos += size
        if pos != len(data):
            raise ValueError("truncated spool chunk")
        return cls(pid, seq, strings, records, dtypes, symbols, rows)


def chunk_name(pid: int, seq: int) -> str:
    return f"{pid}-{seq:09d}{CHUNK_SUFFIX}"


class SpoolWriter:
    """Writes a process's chunks and owns its string table. Thread-safe."""

    def __init__(self, directory: str, pid: int | None = None) -> None:
        self.directory = directory
        self.pid = os.getpid() if pid is None else pid
        self._lock = threading.Lock()
        self._seq = 0
        self._ids: dict[str, int] = {"": 0}
        self._new: list[tuple[int, str]] = []
        self.bytes_written = 0
        self.closed = False
        # Chunks that could not be written (a full or failing spool directory): what they held is
        # lost, except their string definitions, layouts and symbols, which go with the next chunk.
        self.dropped_chunks = 0
        self.dropped_records = 0
        self.error: str | None = None
        self._reported_drops = 0
        self._carry_dtypes: dict[str, Any] = {}
        self._carry_symbols: dict[tuple[str, int], int] = {}
        self.say_on_stderr = True  # False where the program's stderr was closed: fd 2 may be its own file

    def intern(self, value: str) -> int:
        """Return the local id of ``value``, defining it in the next chunk if it is new."""
        sid = self._ids.get(value)
        if sid is None:
            with self._lock:
                sid = self._ids.get(value)
                if sid is None:
                    sid = len(self._ids)
                    self._ids[value] = sid
                    self._new.append((sid, value))
        return sid

    def write(
        self,
        records: dict[str, Any] | None = None,
        dtypes: dict[str, Any] | None = None,
        symbols: dict[tuple[str, int], int] | None = None,
        rows: dict[str, list[tuple[Any, ...]]] | None = None,
    ) -> None:
        """Write one chunk holding the given records and every string defined since the last one."""
        with self._lock:
            if self.closed or not (records or rows or self._new):
                return
            rows = dict(rows or {})
            if self.dropped_records > self._reported_drops:  # said with the first chunk that gets through
                rows["dropped"] = [*rows.get("dropped", []), ("spool", self.dropped_records - self._reported_drops)]
                rows["diagnostic"] = [*rows.get("diagnostic", []), (None, "error", (
                    f"{self.dropped_chunks} chunks of records could not be written to the spool directory "
                    f"({self.error}): {self.dropped_records:,} records lost"))]
            chunk = Chunk(self.pid, self._seq, self._new, records or {}, {**self._carry_dtypes, **(dtypes or {})},
                          {**self._carry_symbols, **(symbols or {})}, rows)
            self._new = []
            final = os.path.join(self.directory, chunk_name(chunk.pid, chunk.seq))
            tmp = final + ".tmp"
            size = 0
            try:
                with open(tmp, "wb") as fh:
                    for part in chunk.parts():
                        size += fh.write(part)
                os.replace(tmp, final)
            except FileNotFoundError:
                # The session is over (its spool is gone) while this process still runs: a
                # daemon that outlived the profiled program. Its late records have nowhere to go.
                self.closed = True
                return
            except OSError as exc:  # a full disk: this chunk is lost, the program goes on
                self._lost(chunk, tmp, exc)
                return
            self._seq += 1
            self._carry_dtypes, self._carry_symbols = {}, {}
            self._reported_drops = self.dropped_records
            self.bytes_written += size

    def _lost(self, chunk: Chunk, tmp: str, exc: OSError) -> None:
        """Count a chunk that could not be written; keep what later chunks refer to."""
        try:
            os.unlink(tmp)
        except OSError:
            pass
        self._new = chunk.strings + self._new
        self._carry_dtypes, self._carry_symbols = chunk.dtypes, chunk.symbols
        lost = sum(len(items) for table, items in chunk.rows.items() if table not in ("dropped", "diagnostic"))
        for name, blob in chunk.records.items():
            itemsize = getattr(chunk.dtypes.get(name), "itemsize", 0)
            nbytes = sum(memoryview(b).nbytes for b in (blob if isinstance(blob, list) else [blob]))
            lost += nbytes // itemsize if itemsize else 1
        first = self.error is None
        self.error = exc.strerror or type(exc).__name__
        self.dropped_chunks += 1
        self.dropped_records += lost
        if first and self.say_on_stderr:  # one line in the program's stderr, once: the launcher may never hear of it
            try:
                os.write(2, f"gpuscope: cannot write to the spool directory {self.directory} ({self.error}): "
                            "records are lost until it can\n".encode())
            except OSError:
                pass


def ready_chunks(directory: str) -> Iterator[tuple[int, int, str]]:
    """Yield ``(pid, seq, path)`` of the complete chunks in ``directory``, in no particular order."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if not name.endswith(CHUNK_SUFFIX):
            continue
        stem = name[: -len(CHUNK_SUFFIX)]
        pid_s, _, seq_s = stem.partition("-")
        if pid_s.isdigit() and seq_s.isdigit():
            yield int(pid_s), int(seq_s), os.path.join(directory, name)


def say_ending(spool_dir: str, pid: int) -> None:
    """Tell the launcher that process ``pid`` has begun to end (it need not pass on a signal the
    process got already, from its group)."""
    try:
        os.close(os.open(os.path.join(spool_dir, f"{ENDING_PREFIX}{pid}"), os.O_CREAT | os.O_WRONLY, 0o600))
    except OSError:
        pass


def is_ending(spool_dir: str, pid: int) -> bool:
    """Return whether process ``pid`` said it has begun to end (:func:`say_ending`)."""
    return os.path.exists(os.path.join(spool_dir, f"{ENDING_PREFIX}{pid}"))


def move_report(partial: str, final: str) -> bool:
    """Move the report file ``partial``, with its DuckDB log ``partial.wal`` if there is one, to
    ``final``: a file or link there is replaced (a link itself, never what it points at), and the log
    of the file it replaces is removed first, so it is never replayed into this one. Return False if
    ``partial`` is not there (another process moved it). Raises OSError if it cannot be moved."""
    claimed = partial + ".placing"
    try:
        os.rename(partial, claimed)  # one process wins: the others find nothing to move
    except FileNotFoundError:
        return False
    try:
        os.unlink(final + ".wal")
    except FileNotFoundError:
        pass
    os.replace(claimed, final)
    if os.path.lexists(partial + ".wal"):
        os.replace(partial + ".wal", final + ".wal")
    return True


def leave_report(spool_dir: str, partial: str, final: str) -> None:
    """Note in the spool that the report is written to ``partial`` and goes to ``final``."""
    tmp = os.path.join(spool_dir, REPORT_NOTE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"partial": partial, "final": final}, fh)  # names that are not UTF-8 stay \udcXX escapes
    os.replace(tmp, os.path.join(spool_dir, REPORT_NOTE))


def place_left_report(spool_dir: str) -> bool:
    """The launcher is gone: move the report it was writing (see :func:`leave_report`) into place,
    and remove its working directory. Return whether this process moved it; never raises."""
    try:
        with open(os.path.join(spool_dir, REPORT_NOTE), encoding="utf-8") as fh:
            note = json.load(fh)
        partial, final = str(note["partial"]), str(note["final"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    try:
        moved = move_report(partial, final)
    except OSError:
        return False
    if moved and os.path.dirname(partial).endswith(".recording"):
        shutil.rmtree(os.path.dirname(partial), ignore_errors=True)
    return moved
