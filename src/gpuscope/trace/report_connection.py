"""The DuckDB connection a report is read through: the file opened as data, within limits.

Each report gets a database of its own in memory, with the report file attached to it read-only
(two readers of one file in one process never share settings: each has its own spill folder). Before
the file is attached, the connection gets its limits: memory (past it sorts and joins spill to a
private temporary folder), threads, no extension installed or loaded on its own; after, its catalog
is checked (report_catalog.py), file access outside the folders named is turned off, and the
configuration is locked. A query that runs past the time limit is interrupted (:class:`Deadline`).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import threading
import uuid
from pathlib import Path
from types import TracebackType

import duckdb

from ..errors import ReportError
from ..safe_text import storable

DB = "report"  # the name the report file is attached as
# DuckDB's memory while reading a report: past it, sorts, joins and the analyses' temporary tables
# spill to a private temporary folder, so that reading a report of tens of millions of rows stays
# within a machine's memory. GPUSCOPE_MEMORY_LIMIT (a DuckDB size, such as 4GB) sets it.
MEMORY_LIMIT = "1GB"
MEMORY_ENV = "GPUSCOPE_MEMORY_LIMIT"
# The longest one query on a report may run, in seconds (0: no limit). The analyses of ten million
# kernels run many queries of seconds to a minute each; a report that makes one run for half an hour
# is not one gpuscope wrote.
TIME_LIMIT_S = 1800.0
TIME_ENV = "GPUSCOPE_QUERY_TIME_LIMIT"
_SIZE = re.compile(r"\s*\d+(\.\d+)?\s*([kmgt]i?b|b|bytes)?\s*", re.IGNORECASE)  # what DuckDB takes as a size


def memory_limit() -> str:
    """Return the memory a report's connection may use, as GPUSCOPE_MEMORY_LIMIT gives it (a DuckDB
    size such as 4GB; :func:`connect` checks it)."""
    return os.environ.get(MEMORY_ENV) or MEMORY_LIMIT


_UNITS = {"b": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def larger_size(limit: str) -> str:
    """Return a memory size four times ``limit`` (a DuckDB size such as 1GB, in its units' family:
    decimal or binary), to suggest when ``limit`` was not enough; ``4GB`` when ``limit`` is not a size."""
    m = _SIZE.fullmatch(limit)
    if not m:
        return "4GB"
    unit = (m.group(2) or "b").lower()
    size = float(limit.strip()[: len(limit.strip()) - len(m.group(2) or "")].strip()) * _UNITS[unit] * 4
    units = ("TiB", "GiB", "MiB") if unit.endswith("ib") else ("TB", "GB", "MB")
    size = max(size, _UNITS[units[-1].lower()])
    for name in units:
        if size >= _UNITS[name.lower()] or name.startswith("M"):
            return f"{size / _UNITS[name.lower()]:.1f}".rstrip("0").rstrip(".") + name
    return "4GB"


def time_limit() -> float:
    """Return the seconds one query may run (0: no limit), from GPUSCOPE_QUERY_TIME_LIMIT."""
    text = os.environ.get(TIME_ENV)
    if not text:
        return TIME_LIMIT_S
    try:
        value = float(text)
    except ValueError:
        return TIME_LIMIT_S
    return value if value >= 0 else TIME_LIMIT_S


def threads() -> int:
    """Return the threads a report's connection may use: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_file(p: Path) -> None:
    """Raise ReportError unless ``p`` is a regular file this process may read (never blocks: a FIFO
    is refused, not opened for reading)."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ReportError(p, "no such report file") from None
    except IsADirectoryError:
        raise ReportError(p, "is a directory, not a report file") from None
    except PermissionError:
        raise ReportError(p, "permission denied: this user may not read it") from None
    except OSError as exc:
        raise ReportError(p, f"cannot open it ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if stat.S_ISDIR(mode):
        raise ReportError(p, "is a directory, not a report file")
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise ReportError(p, f"is {kind}, not a regular file: a report is read from a file")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect(p: Path, spill: str, writable: list[Path] | None = None,
            memory: str | None = None) -> duckdb.DuckDBPyConnection:
    """Return a connection of its own with the report ``p`` attached read-only as ``report`` but not
    yet its default database, DuckDB's temporary files in ``spill``, within the memory (``memory``,
    else :func:`memory_limit`) and thread limits; raise ReportError for a limit that is not one,
    duckdb.Error where DuckDB cannot attach it."""
    limit = memory or memory_limit()
    if not _SIZE.fullmatch(limit):
        raise ReportError(p, f"{MEMORY_ENV}={limit!r} is not a size such as 4GB")
    con = duckdb.connect(":memory:", config={"threads": threads(), "temp_directory": spill,
                                             "autoinstall_known_extensions": False,
                                             "autoload_known_extensions": False})
    try:
        con.execute("SET enable_progress_bar = false")  # a long query draws no bar among gpuscope's output
        try:
            con.execute(f"SET memory_limit = {_quote(limit)}")
        except duckdb.Error as exc:
            raise ReportError(p, f"{MEMORY_ENV}={limit!r} is not a memory size DuckDB takes "
                                 f"({str(exc).strip().splitlines()[0]})") from None
        if writable:  # the folders a query may write (an export's output), set while it may still be set
            allowed = ", ".join(_quote(str(d).rstrip(os.sep) + os.sep) for d in writable)
            con.execute(f"SET allowed_directories = [{allowed}]")
        name, fd = str(p), None
        if storable(name) != name:  # DuckDB takes UTF-8 names only: the file through a descriptor of ours
            fd = os.open(p, os.O_RDONLY)
            name = f"/proc/self/fd/{fd}"
        try:
            con.execute(f"ATTACH {_quote(name)} AS {DB} (READ_ONLY)")
        finally:
            if fd is not None:
                os.close(fd)  # DuckDB holds its own
    except BaseException:
        con.close()
        raise
    return con


def seal(con: duckdb.DuckDBPyConnection) -> None:
    """Make ``report`` the default database, turn file access off and lock the configuration."""
    con.execute(f"USE {DB}")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def new_spill_folder() -> str:
    """Return the name of a private folder for DuckDB's temporary files (made when DuckDB first
    spills; :func:`remove_spill` removes it)."""
    return os.path.join(tempfile.gettempdir(), f"gpuscope-spill-{os.getpid()}-{uuid.uuid4().hex[:12]}")


def remove_spill(folder: str) -> None:
    """Remove a folder of :func:`new_spill_folder` and what is in it."""
    shutil.rmtree(folder, ignore_errors=True)


class Deadline:
    """``with Deadline(con):`` interrupts the query running on ``con`` once the time limit has
    passed; ``expired`` says afterwards whether it did."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.expired = False
        self._timer: threading.Timer | None = None

    def _interrupt(self) -> None:
        self.expired = True
        self.con.interrupt()

    def __enter__(self) -> Deadline:
        seconds = time_limit()
        if seconds > 0:
            self._timer = threading.Timer(seconds, self._interrupt)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
