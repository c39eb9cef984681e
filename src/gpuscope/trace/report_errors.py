"""What a failed query on a report says: the cause, named from what DuckDB raised.

- the report's file cannot be read (a damaged block, a cut file): "damaged or truncated report";
- the memory or time allowed ran out: how much, and the variable that gives more;
- a disk filled, or a file or folder may not be written or read: that, with the file DuckDB names;
- anything else is about the query (its syntax, a name, a cast): an error in the SQL query. For
  the Python API that is the caller's SQL; the commands run only gpuscope's own, so they say it
  is gpuscope's error (cli/failures.py).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import duckdb

from ..errors import GpuscopeError, QueryError, ReadLimitError, ReportError
from .report_connection import MEMORY_ENV, TIME_ENV, larger_size, memory_limit, time_limit

# What DuckDB raises when a report's data blocks cannot be read (truncated or damaged file).
_FILE_ERRORS = (duckdb.IOException, duckdb.SerializationException, duckdb.InternalException,
                duckdb.FatalException)
_DISK_FULL = (os.strerror(errno.ENOSPC), "No space left on device", "disk is full")
_DENIED = (os.strerror(errno.EACCES), os.strerror(errno.EPERM), "Permission denied")


def first_line(exc: BaseException) -> str:
    """Return the first line of ``exc``'s text (its type's name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def disk_full(exc: BaseException) -> bool:
    """Return whether ``exc`` says a disk (or quota) filled up."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(s in str(exc) for s in _DISK_FULL)


def denied(exc: BaseException) -> bool:
    """Return whether ``exc`` says a file or folder may not be read or written by this user."""
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM):
        return True
    return isinstance(exc, duckdb.IOException) and any(s in str(exc) for s in _DENIED)


def explain(path: Path, exc: duckdb.Error, timed_out: bool = False) -> GpuscopeError:
    """Return the error to raise for ``exc``, raised by a query on the report at ``path``;
    ``timed_out``: the query was interrupted for running past the time limit."""
    text = first_line(exc)
    if isinstance(exc, duckdb.OutOfMemoryException):
        limit = memory_limit()
        return ReadLimitError(path, f"reading it needed more than the memory allowed ({limit}): set "
                                 f"{MEMORY_ENV} higher, such as {larger_size(limit)} ({text})")
    if isinstance(exc, duckdb.InterruptException) and timed_out:
        return ReadLimitError(path, f"a query on it ran past the time limit of {time_limit():g} s; set "
                                 f"{TIME_ENV} higher (seconds; 0: no limit)")
    if disk_full(exc):
        return GpuscopeError(f"the disk is full: {text}")
    if denied(exc):
        return GpuscopeError(f"permission denied: {text}")
    if isinstance(exc, _FILE_ERRORS):
        return ReportError(path, f"damaged or truncated report ({text})")
    return QueryError(text)
