"""The spool: how records leave the profiled process.

Each profiled process writes numbered chunk files into a spool directory that the launcher owns.
A chunk appears atomically (written under a temporary name, then renamed), so the launcher never
reads half a chunk, and a chunk that was renamed survives a crash of the process that wrote it.
The launcher ingests chunks in order per process and deletes them.

This module runs inside the profiled process: standard library only.
"""

from __future__ import annotations

import os
import pickle
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

CHUNK_SUFFIX = ".chunk"
SPOOL_ENV = "GPUSCOPE_SPOOL"


@dataclass
class Chunk:
    """One unit of records from one process.

    ``strings`` defines new ids of the process-local string table. ``records`` maps a CUPTI record
    struct name (``ActivityKernel11``) to packed structs, and ``dtypes`` gives the layout of each
    struct name the first time the process sends it. ``symbols`` maps what the structs refer to by
    number to local string ids: ``("ptr", address)`` for CUPTI-owned C strings, ``("runtime",
    cbid)`` and ``("driver", cbid)`` for API names. ``rows`` maps a table to rows produced by
    Python-side collectors (tuples in the table's column order, ``pid`` left out).
    """

    pid: int
    seq: int
    strings: list[tuple[int, str]] = field(default_factory=list)
    records: dict[str, bytes] = field(default_factory=dict)
    dtypes: dict[str, Any] = field(default_factory=dict)
    symbols: dict[tuple[str, int], int] = field(default_factory=dict)
    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return pickle.dumps(
            (self.pid, self.seq, self.strings, self.records, self.dtypes, self.symbols, self.rows),
            protocol=pickle.HIGHEST_PROTOCOL,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> "Chunk":
        return cls(*pickle.loads(data))


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
        records: dict[str, bytes] | None = None,
        dtypes: dict[str, Any] | None = None,
        symbols: dict[tuple[str, int], int] | None = None,
        rows: dict[str, list[tuple[Any, ...]]] | None = None,
    ) -> None:
        """Write one chunk holding the given records and every string defined since the last one."""
        with self._lock:
            if self.closed or not (records or rows or self._new):
                return
            chunk = Chunk(
                self.pid, self._seq, self._new, records or {}, dtypes or {}, symbols or {}, rows or {}
            )
            self._new = []
            self._seq += 1
            data = chunk.to_bytes()
            final = os.path.join(self.directory, chunk_name(chunk.pid, chunk.seq))
            tmp = final + ".tmp"
            try:
                with open(tmp, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, final)
            except FileNotFoundError:
                # The session is over (its spool is gone) while this process still runs: a
                # daemon that outlived the profiled program. Its late records have nowhere to go.
                self.closed = True
                return
            self.bytes_written += len(data)


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
