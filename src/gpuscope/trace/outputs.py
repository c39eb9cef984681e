"""Writing an output file without following symbolic links or overwriting anything silently.

Every file a command writes (a report, a chart, an export, ``--output`` text) goes through here:

- a name that exists, as a file, a directory or a symbolic link (even a dangling one), is refused
  unless ``force`` is given; with ``force`` the name is replaced, never what a link points at;
- the content is written to a fresh file of an unpredictable name in the same directory, created
  exclusively (``O_EXCL``: a link planted there is never opened), and moved to its name at the end,
  so a reader sees the old file or the whole new one, and an interrupted write leaves nothing;
- without ``force`` the move is a hard link that fails if the name appeared meanwhile.

A report file is created the same way (:func:`create_report`), empty but valid, before DuckDB opens
it; DuckDB's ``.wal`` beside it is checked first.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

from ..errors import GpuscopeError


def check(path: Path, force: bool, option: str = "-o") -> None:
    """Raise GpuscopeError if ``path`` cannot be written: it exists (without ``force``), is a
    directory, or its directory is missing or not writable."""
    if path.is_dir() and not path.is_symlink():
        raise GpuscopeError(f"output {path} is a directory")
    if os.path.lexists(path) and not force:
        what = "is a symbolic link" if path.is_symlink() else "exists"
        raise GpuscopeError(f"output {path} {what}; use --force-overwrite or choose another {option}")
    parent = path.parent
    if not parent.is_dir():
        raise GpuscopeError(f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise GpuscopeError(f"cannot write {path}: directory {parent} is not writable")


def _place(tmp: str, path: Path, force: bool) -> None:
    """Move the finished ``tmp`` to ``path`` (replacing a name only with ``force``)."""
    if force:
        os.replace(tmp, path)  # rename replaces a link itself, never its target
        return
    try:
        os.link(tmp, path)  # fails if the name exists, a dangling link included
    except FileExistsError:
        raise GpuscopeError(f"output {path} appeared while it was written; use --force-overwrite") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        if os.path.lexists(path):  # a file system without hard links
            raise GpuscopeError(f"output {path} appeared while it was written; use --force-overwrite") from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


@contextlib.contextmanager
def open_output(path: Path, force: bool, mode: str = "w", option: str = "-o") -> Iterator[IO[Any]]:
    """Yield a file to write ``path``'s content to; it takes the name only when the block ends
    without an exception. Raises GpuscopeError for a name that cannot be written (see :func:`check`)."""
    path = Path(path)
    check(path, force, option)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
        os.chmod(tmp, 0o666 & ~_umask())
        _place(tmp, path, force)
    except OSError as exc:
        raise GpuscopeError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_output(path: Path, data: str | bytes, force: bool, option: str = "-o") -> None:
    """Write ``data`` to ``path`` as :func:`open_output` does."""
    with open_output(path, force, "wb" if isinstance(data, bytes) else "w", option) as fh:
        fh.write(data)


def create_report(path: Path, force: bool) -> None:
    """Create ``path`` as an empty DuckDB database, with the guarantees of :func:`open_output`.

    Raises GpuscopeError if it exists (without ``force``), or if ``path.wal`` exists: DuckDB would
    write through a link planted there.
    """
    import duckdb  # noqa: PLC0415

    wal = path.with_name(path.name + ".wal")
    if os.path.lexists(wal):
        if not force:
            raise GpuscopeError(f"{wal} exists (the log of an earlier report?); remove it or use --force-overwrite")
        os.unlink(wal)
    check(path, force)
    workdir = tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        tmp = os.path.join(workdir, "report")
        duckdb.connect(tmp).close()
        os.chmod(tmp, 0o666 & ~_umask())
        _place(tmp, path, force)
    except duckdb.Error as exc:
        raise GpuscopeError(f"cannot create {path}: {str(exc).splitlines()[0]}") from None
    except OSError as exc:
        raise GpuscopeError(f"cannot create {path}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would race other threads)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022
