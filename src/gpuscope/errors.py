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
