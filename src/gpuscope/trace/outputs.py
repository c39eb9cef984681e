"""Writing an output file without following symbolic links or overwriting anything silently.

Every file a command writes (a report, a chart, an export, ``--output`` text) goes through here:

- a name that exists, as a file, a directory or a symbolic link (even a dangling one), is refused
  unless ``force`` is given; with ``force`` the name is replaced, never what a link points at;
- the content is written to a fresh file of an unpredictable name in the same directory, created
  exclusively (``O_EXCL``: a link planted there is never opened), and moved to its name at the end,
  so a reader sees the old file or the whole new one, and an interrupted write leaves nothing;
- without ``force`` the move is a hard link that fails if the name appeared meanwhile.

A report's name is claimed before the program runs (:func:`create_report`: an empty but valid file,
or with ``force`` the file already there), and DuckDB's ``.wal`` beside it is checked first. The
report itself is written under a name of its own (:class:`PartialReport`) and moved to its name when
finished, so two runs writing the same name each finish a whole report and the last to end stays.
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
from ..safe_text import storable
from ..spool import move_report

# Report names claimed by this process (their device and inode): removed on failure only if still ours.
_claimed: dict[str, tuple[int, int]] = {}


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
    """Claim ``path`` for a report: create it as an empty DuckDB database, with the guarantees of
    :func:`open_output`; with ``force``, a file already there stays until the finished report replaces
    it (:class:`PartialReport`).

    Raises GpuscopeError if it exists (without ``force``), or if ``path.wal`` exists without ``force``:
    DuckDB would write through a link planted there (with ``force``, a log without its report is removed).
    """
    import duckdb  # noqa: PLC0415

    wal = path.with_name(path.name + ".wal")
    if os.path.lexists(wal):
        if not force:
            raise GpuscopeError(f"{wal} exists (the log of an earlier report?); remove it or use --force-overwrite")
        if not os.path.lexists(path):
            os.unlink(wal)
    check(path, force)
    if force and os.path.lexists(path):
        return
    workdir = tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent)
    fd: int | None = None
    try:
        tmp = os.path.join(workdir, "report")
        database, fd = database_name(workdir, "report")
        duckdb.connect(database).close()
        os.chmod(tmp, 0o666 & ~_umask())
        try:
            _place(tmp, path, False)
        except GpuscopeError:
            if not force:
                raise
            return  # another run with --force-overwrite claimed it meanwhile: the last to end stays
        st = os.lstat(path)
        _claimed[os.fspath(path)] = (st.st_dev, st.st_ino)
    except duckdb.Error as exc:
        raise GpuscopeError(f"cannot create {path}: {str(exc).splitlines()[0]}") from None
    except OSError as exc:
        raise GpuscopeError(f"cannot create {path}: {exc.strerror or exc}") from None
    finally:
        if fd is not None:
            os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)


def release_claim(path: Path) -> None:
    """Remove the empty report that :func:`create_report` left at ``path``, if it is still the one this
    process created (never a report another run put there meanwhile)."""
    ours = _claimed.pop(os.fspath(path), None)
    if ours is None:
        return
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) == ours:
            os.unlink(path)


def database_name(directory: str, name: str) -> tuple[str, int | None]:
    """Return a name by which DuckDB opens ``directory/name`` (``name`` valid UTF-8), and the descriptor
    to close once DuckDB is done with it (None if none was opened): the path itself, or, when it is not
    valid UTF-8 (DuckDB takes only UTF-8 names), the same file through the directory's descriptor in
    /proc/self/fd."""
    path = os.path.join(directory, name)
    if storable(path) == path:
        return path, None
    if storable(name) != name:
        raise ValueError(f"not a UTF-8 file name: {storable(name)}")
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)  # not inherited by the program (PEP 446)
    return f"/proc/self/fd/{fd}/{name}", fd


@contextlib.contextmanager
def readable_name(path: Path) -> Iterator[Path]:
    """Yield a name by which DuckDB can open the report ``path``: the path itself, or, when its
    directory is not valid UTF-8, the same file through the directory's descriptor (see
    :func:`database_name`); a file name that is not valid UTF-8 is yielded as it is."""
    name = os.path.basename(path)
    if storable(name) != name or storable(os.fspath(path)) == os.fspath(path):
        yield path
        return
    database, fd = database_name(os.path.dirname(os.path.abspath(path)), name)
    try:
        yield Path(database)
    finally:
        if fd is not None:
            os.close(fd)


class PartialReport:
    """A report being written under a name of its own, in a private directory beside where it goes;
    :meth:`place` moves it there whole when it is finished.

    ``file`` is its path, ``database`` the name DuckDB opens it by (see :func:`database_name`).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.workdir = tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".recording", dir=path.parent)
        except OSError as exc:
            raise GpuscopeError(f"cannot create {path}: {exc.strerror or exc}") from None
        self.file = os.path.join(self.workdir, "report")
        self.database, self._fd = database_name(self.workdir, "report")
        self.placed = False

    def place(self) -> None:
        """Move the finished report (and its ``.wal``, if its last checkpoint failed) to its name,
        replacing what is there, and remove the private directory. Raises GpuscopeError if it cannot
        be moved (it is left where it is, and the message says where)."""
        if self.placed:
            return
        try:
            if os.path.exists(self.file):
                os.chmod(self.file, 0o666 & ~_umask())
            if move_report(self.file, os.fspath(self.path)):
                _claimed.pop(os.fspath(self.path), None)  # a finished report now, not the claim
        except OSError as exc:
            self.close()
            raise GpuscopeError(f"cannot move the report to {self.path} ({exc.strerror or exc}); it is in "
                                f"{self.workdir}") from None
        self.placed = True
        self.discard()

    def close(self) -> None:
        """Close the directory descriptor that :func:`database_name` may have opened."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        """Remove the private directory and what is left in it."""
        self.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


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
