"""Stats reports computed once, when a report is closed, and stored in it (table ``stats_summary``).

Each stored report is one row: its name, its table as JSON text (title, columns with their units,
rows of plain values, notes) and its ``basis``: what it was computed from. A stored table is used
only while its basis is the report's own, computed again when it is read:

- the row count and a digest of the rows (the sum of DuckDB's hash of each whole row) of every other
  table of the report, so that a report trimmed, merged, imported into or edited after it was closed
  gets its tables computed again;
- a digest of the ``meta`` items and the report's schema version;
- the gpuscope version, a digest of the text of the code that computes and reads the tables
  (:data:`CODE`), and the DuckDB version (its hash is the digest's).

Reading runs no code of the report's: the rows are plain text values, parsed as JSON.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ..version import __version__
from . import schema

if TYPE_CHECKING:
    from .report import Report

TABLE = "stats_summary"
FORMAT = 1  # of the stored content and basis: a reader of another format computes


# The code a stored table depends on, as paths in the gpuscope package: the reader, the packages of
# analysis that the stored reports' modules may import (docs/architecture.md draws them, and
# tests/unit/test_import_graph.py holds every import to the drawing) and the base modules.
CODE = ("trace", "analysis/__init__.py", "analysis/table.py", "analysis/column_fetch.py", "analysis/heap.py",
        "analysis/ops", "analysis/steps", "analysis/ranges", "analysis/distributed", "errors.py", "safe_text.py",
        "units.py", "version.py")


@functools.cache  # once a process: the code it runs does not change under it
def code_digest() -> str:
    """A digest of the text of the modules of :data:`CODE` (what a stored table depends on)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for part in CODE:
        where = root / part
        for p in sorted(where.rglob("*.py")) if where.is_dir() else [where]:
            h.update(f"{p.relative_to(root).as_posix()}\0".encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def basis(report: Report) -> dict[str, Any]:
    """Return what the report's stats tables are computed from, as stored beside them."""
    sources = [t for t in schema.TABLES if t not in (TABLE, "meta")]
    query = " UNION ALL ".join(f"SELECT '{t}' AS t, count(*) AS n, CAST(sum(hash(x)) AS VARCHAR) AS h FROM {t} x"
                               for t in sources)
    tables = {str(t): [int(n), h or "0"] for t, n, h in report.sql(query)}
    meta = report.sql("SELECT key, value FROM meta ORDER BY key")
    return {"format": FORMAT, "gpuscope": __version__, "code": code_digest(), "duckdb": duckdb.__version__,
            "schema_version": report.meta.get("schema_version"),
            "meta": hashlib.sha256(json.dumps(meta).encode()).hexdigest(),
            "tables": {t: tables[t] for t in sources}}


def read(report: Report) -> dict[str, dict[str, Any]]:
    """Return the stored tables of ``report`` whose basis is still the report's, by name (each as
    stored: ``title``, ``columns``, ``rows``, ``notes``); empty when there are none to use."""
    if not report.count(TABLE):
        return {}
    rows = report.sql(f"SELECT name, basis, content FROM {TABLE}")
    names = Counter(r[0] for r in rows)
    now = json.loads(json.dumps(basis(report)))
    out = {}
    for name, stored_basis, content in rows:
        if name is None or names[name] != 1:
            continue  # two tables of one name: neither is the one the writer stored
        try:
            if json.loads(stored_basis) != now:
                continue
            doc = json.loads(content)
        except (TypeError, ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            continue
        if _well_formed(doc):
            out[str(name)] = doc
    return out


def _well_formed(doc: Any) -> bool:
    """Whether ``doc`` has the shape a stored table has (plain values only)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("title"), str):
        return False
    columns, rows, notes = doc.get("columns"), doc.get("rows"), doc.get("notes")
    if not isinstance(columns, list) or not all(
            isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c) for c in columns):
        return False
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        return False
    return isinstance(rows, list) and all(
        isinstance(r, list) and len(r) == len(columns)
        and all(v is None or type(v) in (int, float, str, bool) for v in r) for r in rows)


def write(database: Path, tables: dict[str, dict[str, Any]], stored_basis: dict[str, Any]) -> None:
    """Store ``tables`` (name -> title, columns, rows, notes) with ``stored_basis`` in the report file
    ``database`` (no other connection may hold it), replacing any stored before, in one transaction."""
    con = duckdb.connect(str(database), config={"autoinstall_known_extensions": False,
                                                "autoload_known_extensions": False})
    try:
        con.execute("BEGIN TRANSACTION")
        con.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} ({schema.TABLES[TABLE]}\n)")
        con.execute(f"DELETE FROM {TABLE}")
        text = json.dumps(stored_basis)
        con.executemany(f"INSERT INTO {TABLE} VALUES (?, ?, ?)",
                        [[name, text, json.dumps(doc)] for name, doc in tables.items()])
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
    finally:
        con.close()
