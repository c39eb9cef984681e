"""What a reader command says when it fails on something other than a GpuscopeError: the cause.

- a file it reads or writes: the disk is full, permission denied, or the system's reason;
- anything else (an exception of the analyses, an error in gpuscope's own SQL): the report's rows
  are checked (trace/report_health.py); rows gpuscope never writes make it a damaged report
  (exit 2), rows as written make it gpuscope's own error (exit 3, to be reported).
"""

from __future__ import annotations

import errno
from pathlib import Path

from ..errors import GpuscopeError, InternalError, QueryError

DEBUG_ENV = "GPUSCOPE_DEBUG"  # set to see the traceback of a failure said in one line


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def os_error(exc: OSError) -> GpuscopeError | None:
    """Return the error that names the cause of ``exc`` (a file that could not be read or written),
    or None for one without a file or a known cause (the output stream: the caller says it)."""
    where = f"{exc.filename}: " if exc.filename is not None else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return GpuscopeError(f"the disk is full: cannot write {where.rstrip(': ') or 'a file'} ({exc.strerror})")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return GpuscopeError(f"{where}permission denied ({exc.strerror})")
    if exc.filename is None:
        return None
    return GpuscopeError(f"{where}{exc.strerror or exc}")


def _reports(given: object) -> list[Path]:
    """The report files a command was given (``args.report``: one path or a list)."""
    paths = given if isinstance(given, list) else [given] if given else []
    return [Path(p) for p in paths if isinstance(p, (str, Path)) and Path(p).is_file()]


def _damage(reports: list[Path]) -> str | None:
    """Return '<report>: <what>' for the first report whose rows gpuscope never writes, else None."""
    from ..trace.report import Report  # noqa: PLC0415
    from ..trace.report_health import data_problem  # noqa: PLC0415

    for path in reports:
        try:
            with Report.open(path) as report:
                problem = data_problem(report)
        except GpuscopeError as exc:
            return str(exc)
        except Exception:  # noqa: BLE001  (the check itself failed on these rows: not as written)
            return f"{path}: rows that cannot be checked"
        if problem:
            return f"{path}: damaged report ({problem})"
    return None


def _what(exc: Exception) -> str:
    if isinstance(exc, QueryError):
        return _first_line(exc).removeprefix("error in the SQL query: ")
    return f"{type(exc).__name__}: {_first_line(exc)}"


def own(exc: Exception) -> InternalError:
    """Return the one-line error for ``exc`` raised by gpuscope's own code, not while it read a
    report (exit 3, to be reported)."""
    return InternalError(f"{_what(exc)}; please report it; {DEBUG_ENV}=1 shows the traceback")


def unexpected(exc: Exception, given: object) -> GpuscopeError:
    """Return the one-line error for ``exc``, raised by a command that read the reports ``given``:
    damaged (exit 2) when their rows are not as gpuscope writes them, else gpuscope's own (exit 3)."""
    damage = _damage(_reports(given))
    if damage:
        return GpuscopeError(f"{damage}; reading it failed ({_what(exc)})")
    return own(exc)
