"""The reports of a fleet analysis: report files and Parquet folders, each once, in Parquet form."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from ....errors import GpuscopeError
from ....trace import parquet
from ....trace.report import Report
from ....trace.report_connection import check_file
from ....trace.schema import FILE_SUFFIX


@dataclass(frozen=True)
class FleetSource:
    """One report in Parquet form: ``folder`` (one ``TABLE.parquet`` per table), its ``label`` (the
    file's or folder's name), ``identity`` (a digest of its ``meta``: equal for the same report
    given twice) and ``meta``."""

    folder: Path
    label: str
    identity: str
    meta: dict[str, object]


def _expand(path: Path) -> list[Path]:
    """A report file, a Parquet folder, or a directory holding either (one level down)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        check_file(path)  # a FIFO, socket or device: refused with what it is, never opened for reading
        raise GpuscopeError(f"{path}: no such report file or directory")
    if (path / "schema.json").is_file():
        return [path]
    found = sorted(p for p in path.iterdir() if (p.is_file() and p.name.endswith(FILE_SUFFIX))
                   or (p.is_dir() and (p / "schema.json").is_file()))
    if not found:
        raise GpuscopeError(f"{path}: no {FILE_SUFFIX} reports or Parquet exports in this directory")
    return found


def _meta(folder: Path) -> dict[str, object]:
    target = str(folder / "meta.parquet").replace("'", "''")
    try:
        rows = duckdb.sql(f"SELECT key, value FROM read_parquet('{target}')").fetchall()
    except duckdb.Error as exc:
        raise GpuscopeError(f"{folder}: not a gpuscope Parquet export ({str(exc).splitlines()[0]})") from None
    return {k: json.loads(v) for k, v in rows}


def open_sources(paths: list[str], workdir: Path, warn: Callable[[str], None]) -> list[FleetSource]:
    """Return one :class:`FleetSource` per distinct report among ``paths``, exporting report files
    to Parquet under ``workdir``; a report given twice is kept once, with a warning."""
    out: list[FleetSource] = []
    seen: dict[str, str] = {}
    for given in paths:
        for path in _expand(Path(given)):
            if path.is_file():
                folder = workdir / f"{len(out)}-{path.name}"
                with Report.open(path) as report:
                    parquet.write(report, folder)
                label = path.name.removesuffix(FILE_SUFFIX)
            else:
                folder, label = path, path.name
            meta = _meta(folder)
            identity = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
            if identity in seen:
                warn(f"{path} is the same report as {seen[identity]}: counted once")
                continue
            seen[identity] = str(path)
            out.append(FleetSource(folder, label, identity, meta))
    return out


def runs_differ(sources: list[FleetSource]) -> str | None:
    """One line saying what differs between reports of different runs (their command, their
    devices); None when they are all of one run (the same command)."""
    commands = {json.dumps(s.meta.get("command")) for s in sources}
    if len(commands) <= 1:
        return None
    shown = sorted(" ".join(map(str, s.meta.get("command") or [])) for s in sources)
    return (f"reports of {len(commands)} different runs: their commands differ ({shown[0]!r} ... {shown[-1]!r}); "
            "each row names its report")
