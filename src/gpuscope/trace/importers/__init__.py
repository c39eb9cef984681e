"""Traces written by other profilers, imported as gpuscope reports.

:func:`import_trace` recognises the format by the file's first bytes: an SQLite database is an
Nsight Systems export (``nsys export --type sqlite``), anything else is read as a PyTorch profiler
(Kineto) JSON trace, plain or gzip. The report is written whole or not at all (:mod:`.sink`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import GpuscopeError

SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class Imported:
    """An import's result: the report written, the source's format and the rows per table."""

    path: Path
    format: str
    counts: dict[str, int]


def source_format(path: Path) -> str:
    """Return ``nsys-sqlite`` or ``pytorch-profiler`` for the trace at ``path``."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        raise GpuscopeError(f"{path}: cannot read ({exc.strerror})") from None
    return "nsys-sqlite" if head == SQLITE_MAGIC else "pytorch-profiler"


def import_trace(source: Path, output: Path) -> Imported:
    """Import the trace at ``source`` into a new report at ``output``; return what was written.

    Raises GpuscopeError (one line) when the source is not a trace of a known format, is truncated,
    or holds no GPU work; no file is left at ``output`` then."""
    from .sink import ReportSink  # here, not above: the import's worker processes need none of it

    fmt = source_format(source)
    sink = ReportSink(output)
    try:
        meta: dict[str, Any]
        if fmt == "nsys-sqlite":
            from .nsys import import_nsys

            meta = import_nsys(source, sink)
        else:
            from .kineto import import_kineto

            meta = import_kineto(source, sink)
        sink.finish(command=None, **meta)
    except BaseException:
        sink.abort()
        raise
    return Imported(output, fmt, dict(sink.counts))
