"""A reader command's output kept beside its report (:mod:`.sidecar`), so that running the command
again on a large report answers at once instead of deriving everything from millions of rows.

Only reports of at least :data:`MIN_OPERATIONS` GPU operations (kernels, copies, sets) are kept:
smaller ones are derived in seconds. An output is used only when everything it was made from is
unchanged: the report file (:func:`.sidecar.report_key`), the command and its options, the width
tables are laid out in, gpuscope's version and its code (the size and modification time of each of
its modules), gpuscope's environment variables and the cached machine calibrations (roofline
ceilings). The file is text: the output, after a JSON header line with that key; reading it runs
nothing, and text holding a terminal control character (which gpuscope's outputs never hold) is not
used. A file that fails a check is ignored (and replaced by the next run).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..trace import sidecar

if TYPE_CHECKING:
    from ..analysis.table import Table
    from ..trace.report import Report

MIN_OPERATIONS = 1_000_000
MAGIC = "gpuscope-output 1"
# what gpuscope's outputs never hold (names are escaped in them): a file that holds one is not one of
# its outputs, and is not printed
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


@functools.cache  # once a process: the code it runs does not change under it
def _code_fingerprint() -> str:
    """A digest of gpuscope's version and of the size and modification time of each of its modules."""
    from .. import version

    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(str(getattr(version, "__version__", "")).encode())
    for p in sorted(root.rglob("*.py")):
        try:
            st = p.stat()
        except OSError:
            continue
        h.update(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def _calibrations() -> list[list[Any]]:
    """The cached calibrations (name, size, modification time): they change roofline ceilings."""
    from ..analysis.roofline.ceilings import cache_dir

    try:
        entries = sorted(os.scandir(cache_dir()), key=lambda e: e.name)
    except OSError:
        return []
    out = []
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        out.append([e.name, st.st_size, st.st_mtime_ns])
    return out


def _key(path: Path, command: str, options: dict[str, Any], laid_out: bool = True) -> dict[str, Any]:
    from .terminal import terminal_width

    return {"report": sidecar.report_key(path), "command": command, "options": options,
            "width": terminal_width() if laid_out else None, "code": _code_fingerprint(),
            "calibrations": _calibrations(),
            "env": sorted([k, v] for k, v in os.environ.items() if k.startswith("GPUSCOPE_"))}


def _name(command: str, options: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps([command, options], sort_keys=True).encode()).hexdigest()[:16]
    return f"{command}-{digest}.txt"


def gpu_operations(report: Report) -> int:
    """Return the number of GPU operations (kernels, copies, sets) of ``report``."""
    return sum(report.count(t) for t in ("kernel", "memcpy", "memset"))


def worth_keeping(operations: int) -> bool:
    """Return whether a report of ``operations`` GPU operations is large enough for its outputs to be kept."""
    return operations >= MIN_OPERATIONS


def stats_table(report: Report, name: str, make: Callable[[Report], Table], options: dict[str, Any],
                operations: int | None = None) -> Table:
    """Return ``make(report)``, the stats table ``name`` made with ``options``: of a large report,
    read from beside it when it was kept there, else made and kept. ``operations``: the report's
    :func:`gpu_operations`, when the caller knows them."""
    if not worth_keeping(gpu_operations(report) if operations is None else operations):
        return make(report)
    table = cached_table(report.path, name, options)
    if table is None:
        table = make(report)
        keep_table(report.path, table, options)
    return table


def cached(path: str | Path, command: str, options: dict[str, Any], laid_out: bool = True) -> str | None:
    """Return the output of ``command`` with ``options`` kept for the report at ``path``, when it
    was made from the same report, code and settings (and, ``laid_out``, terminal width); None otherwise."""
    path = Path(path)
    try:
        mapped = sidecar.read(path, _name(command, options))
        if mapped is None:
            return None
        text = bytes(mapped.buffer()).decode("utf-8")
        header, _, body = text.partition("\n")
        doc = json.loads(header)
        if doc.get("magic") != MAGIC or doc.get("key") != json.loads(json.dumps(_key(path, command, options, laid_out))):
            return None
        return None if _CONTROL.search(body) else body
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return None


def keep(path: str | Path, command: str, options: dict[str, Any], text: str, laid_out: bool = True) -> Path | None:
    """Keep ``text``, the output of ``command`` with ``options`` on the report at ``path``; return
    where it went, or None when no cache directory could take it."""
    path = Path(path)
    try:
        header = json.dumps({"magic": MAGIC, "key": _key(path, command, options, laid_out)})
        body = text.encode("utf-8")
    except (OSError, UnicodeEncodeError):
        return None
    return sidecar.write(path, _name(command, options), [header.encode() + b"\n", body])


def cached_table(path: str | Path, name: str, options: dict[str, Any]) -> Table | None:
    """Return the stats table ``name`` (made with ``options``) kept for the report at ``path``, as
    :func:`cached` finds it; None when there is none to use."""
    from ..analysis.table import Column, Table

    text = cached(path, f"table-{name}", options, laid_out=False)
    if text is None:
        return None
    try:
        doc = json.loads(text)
        return Table(str(doc["name"]), str(doc["title"]), [Column(str(c), str(u)) for c, u in doc["columns"]],  # type: ignore[arg-type]
                     [tuple(r) for r in doc["rows"]], [str(n) for n in doc["notes"]])
    except (ValueError, KeyError, TypeError):
        return None


def keep_table(path: str | Path, table: Table, options: dict[str, Any]) -> Path | None:
    """Keep a stats table of the report at ``path`` (made with ``options``); None when it cannot be
    kept (a value that is not plain data, or no directory to take it)."""
    for row in table.rows:
        if not all(v is None or type(v) in (int, float, str, bool) for v in row):
            return None  # kept only when it reads back the same
    try:
        text = json.dumps({"name": table.name, "title": table.title, "columns": [[c.label, c.unit] for c in table.columns],
                           "rows": table.rows, "notes": table.notes})
    except (TypeError, ValueError):
        return None
    return keep(path, f"table-{table.name}", options, text, laid_out=False)
