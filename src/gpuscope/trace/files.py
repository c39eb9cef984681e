"""Report file names: ``report1.gpuscope``, ``report2.gpuscope``, ... and no silent overwrite."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import GpuscopeError
from .schema import FILE_SUFFIX


def default_output(directory: Path) -> Path:
    """Return the first ``reportN.gpuscope`` in ``directory`` that does not exist yet."""
    n = 1
    while (directory / f"report{n}{FILE_SUFFIX}").exists():
        n += 1
    return directory / f"report{n}{FILE_SUFFIX}"


def output_path(requested: str | None, force: bool, cwd: Path | None = None) -> Path:
    """Return where the report goes, checking that it can be written there.

    Raises GpuscopeError before anything runs if the file exists (without ``force``) or the
    directory cannot be written.
    """
    base = cwd or Path.cwd()
    if requested is None:
        path = default_output(base)
    else:
        path = Path(requested)
        if not path.is_absolute():
            path = base / path
        if path.suffix != FILE_SUFFIX:
            path = path.with_name(path.name + FILE_SUFFIX)
    if path.is_dir():
        raise GpuscopeError(f"output {path} is a directory")
    if path.exists() and not force:
        raise GpuscopeError(f"output {path} exists; use --force-overwrite or choose another -o")
    parent = path.parent
    if not parent.is_dir():
        raise GpuscopeError(f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise GpuscopeError(f"cannot write {path}: directory {parent} is not writable")
    return path
