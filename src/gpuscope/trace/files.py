"""Report file names: ``report1.gpuscope``, ``report2.gpuscope``, ... and no silent overwrite."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from ..errors import GpuscopeError
from . import outputs
from .schema import FILE_SUFFIX


def default_output(directory: Path) -> Path:
    """Return the first ``reportN.gpuscope`` in ``directory`` that does not exist yet."""
    n = 1
    while os.path.lexists(directory / f"report{n}{FILE_SUFFIX}"):
        n += 1
    return directory / f"report{n}{FILE_SUFFIX}"


_PLACEHOLDER = re.compile(r"%(h|q\{([A-Za-z_][A-Za-z0-9_]*)\}|%)")


def expand(requested: str, env: dict[str, str] | None = None, host: str | None = None) -> str:
    """``requested`` with ``%h`` replaced by the host's name and ``%q{NAME}`` by the environment
    variable NAME (``%%``: a percent sign), as Nsight Systems names the reports of a multi-node run.
    Raises GpuscopeError for a variable that is not set."""
    env = dict(os.environ) if env is None else env

    def one(m: re.Match[str]) -> str:
        if m.group(1) == "h":
            return (host or socket.gethostname()).replace("/", "_")
        if m.group(1) == "%":
            return "%"
        name = m.group(2)
        if name not in env:
            raise GpuscopeError(f"-o {requested}: environment variable {name} is not set")
        return env[name].replace("/", "_")

    return _PLACEHOLDER.sub(one, requested)


def output_path(requested: str | None, force: bool, cwd: Path | None = None) -> Path:
    """Return where the report goes, checking that it can be written there.

    Raises GpuscopeError before anything runs if the name exists (a symbolic link included) without
    ``force``, or the directory cannot be written.
    """
    base = cwd or Path.cwd()
    if requested is None:
        path = default_output(base)
    else:
        path = Path(expand(requested))
        if not path.is_absolute():
            path = base / path
        if path.suffix != FILE_SUFFIX:
            path = path.with_name(path.name + FILE_SUFFIX)
    outputs.check(path, force)
    return path


def reserve_report(requested: str | None, force: bool, cwd: Path | None = None) -> Path:
    """Create the report file (empty) where it goes and return its path: :func:`output_path`'s name,
    or without ``requested`` the first free ``reportN``, taken atomically, so runs started together
    in one directory get ``report1``, ``report2``, ... Raises GpuscopeError as :func:`output_path` does."""
    while True:
        path = output_path(requested, force, cwd)
        try:
            outputs.create_report(path, force)
            return path
        except GpuscopeError:
            if requested is None and os.path.lexists(path):
                continue  # another run took this name meanwhile: the next one
            raise
