"""Errors that reach the user as one line and an exit code."""

from __future__ import annotations


class GpuscopeError(Exception):
    """A failure the user can fix; printed as ``gpuscope: error: <message>`` without a traceback."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ReportError(GpuscopeError):
    """A report file that cannot be read: missing, corrupt, truncated or of an unknown version."""

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(f"{path}: {reason}", exit_code=2)
        self.path = path


class ReadLimitError(ReportError):
    """A query on a report used up the memory or the time a reader may use (its message names the
    setting that raises the limit): the report is sound, and a part of an output may be left out."""


class QueryError(GpuscopeError):
    """A SQL query given to an opened report failed on the query itself (its syntax, a name it
    uses, a value it casts), not on the report's file."""

    def __init__(self, message: str) -> None:
        super().__init__(f"error in the SQL query: {message}", exit_code=2)


class InternalError(GpuscopeError):
    """A failure of gpuscope itself (a bug), printed as ``gpuscope: internal error: ...``, exit 3."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=3)
