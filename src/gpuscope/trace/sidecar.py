"""Files derived from a report, kept beside it so that the next reader need not derive them again.

A report ``run.gpuscope`` keeps them in the directory ``run.gpuscope.cache/`` (or, where that
cannot be written, in ``$GPUSCOPE_CACHE_DIR/reports/<hash of the report's path>/``, default
``~/.cache/gpuscope``). Each file records the report it was made from (size, modification time,
inode: :func:`report_key`) and is used only while the report is unchanged.

The directory and its files are never reached through a symbolic link: the directory is opened
with ``O_NOFOLLOW``, files with ``O_NOFOLLOW`` relative to it, and a file is written to a new
name (``O_EXCL``) and renamed over the old one, so that a link planted there is replaced, never
written through. A file that is not a regular file, or that cannot be read, counts as absent.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SUFFIX = ".cache"


def report_key(path: Path) -> dict[str, int]:
    """Return what identifies the report file at ``path`` as it is now: size, mtime (ns), inode."""
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def _user_dir(path: Path) -> Path:
    base = os.environ.get("GPUSCOPE_CACHE_DIR")
    root = Path(base) if base else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuscope"
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24]
    return root / "reports" / digest


def candidates(path: Path) -> list[Path]:
    """Return the directories that may hold ``path``'s derived files, in the order they are tried."""
    return [path.with_name(path.name + SUFFIX), _user_dir(path)]


def _open_dir(d: Path, create: bool) -> int | None:
    """Return a descriptor of directory ``d`` opened without following a link, or None."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        return os.open(d, flags)
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        return None  # a link, not a directory, or not allowed
    try:
        os.makedirs(d.parent, exist_ok=True)
        os.mkdir(d, 0o755)
        return os.open(d, flags)
    except OSError:
        return None


class Mapped:
    """A derived file's bytes, mapped read-only (kept mapped while arrays view them)."""

    def __init__(self, fd: int, size: int) -> None:
        self.map = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
        self.size = size

    def buffer(self) -> Any:
        """Return the bytes as a buffer (``memoryview``); empty for an empty file."""
        return memoryview(self.map) if self.map is not None else memoryview(b"")


def read(path: Path, name: str) -> Mapped | None:
    """Return the derived file ``name`` of the report at ``path``, mapped, from the first
    directory that has it as a regular file; None when none has."""
    for d in candidates(path):
        dfd = _open_dir(d, create=False)
        if dfd is None:
            continue
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
        except OSError:
            os.close(dfd)
            continue
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                return Mapped(fd, st.st_size)
        except (OSError, ValueError):
            pass
        finally:
            os.close(fd)
            os.close(dfd)
    return None


def write(path: Path, name: str, chunks: Iterable[bytes | memoryview]) -> Path | None:
    """Write the derived file ``name`` of the report at ``path`` (atomically: readers see the old
    file or the whole new one); return where it went, or None when no directory could take it."""
    data = list(chunks)
    for d in candidates(path):
        dfd = _open_dir(d, create=True)
        if dfd is None:
            continue
        tmp = f".{name}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
            try:
                with os.fdopen(fd, "wb") as f:
                    for chunk in data:
                        f.write(chunk)
            except BaseException:
                os.unlink(tmp, dir_fd=dfd)
                raise
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            return d / name
        except OSError:
            continue
        finally:
            os.close(dfd)
    return None
