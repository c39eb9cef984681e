"""A report opened again on a DuckDB connection of its own, for a read of every operation.

DuckDB keeps the blocks of the report that a query reads in its cache until its connection is
closed, and a report's connection is locked once opened (its memory cannot be lowered). A read of
ten million operations brings 20-130 MB of blocks into that cache, which then sit beside the
analysis's arrays to its end; read on a connection of its own, closed after, they go with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ...errors import GpuscopeError
from ...trace.report import Report


@contextlib.contextmanager
def own_connection(report: Report) -> Iterator[Report]:
    """``report`` opened again, with the memory limit of its connection (as the default gives it, else
    as that connection shows it), closed on the way out; ``report`` itself where its file cannot be
    opened again. The temporary tables of ``report``'s connection are not on the other."""
    if not report.path.is_file():
        yield report
        return
    limit = _memory_limit(report)
    try:
        own = Report.open(report.path)
        if limit is not None and _memory_limit(own) != limit:  # opened with a limit of its own: that one
            own.close()
            own = Report.open(report.path, memory=limit)
    except GpuscopeError:
        yield report
        return
    try:
        yield own
    finally:
        own.close()


def _memory_limit(report: Report) -> str | None:
    """The memory limit of ``report``'s connection, as a size DuckDB takes; None where unknown."""
    rows = report.sql("SELECT current_setting('memory_limit')")
    return str(rows[0][0]) if rows and rows[0][0] else None
