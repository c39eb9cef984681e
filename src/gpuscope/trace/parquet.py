"""Export a report as Parquet: a folder with one file per table, for pandas, Polars, Spark or DuckDB.

Each table of the report's schema (docs/report-format.md) becomes ``TABLE.parquet`` with the same
columns and types (times as 64-bit integer nanoseconds, names as ids into ``string.parquet``),
written by DuckDB with zstd compression; ``schema.json`` beside them names every table's columns
and types and the schema version (that of this gpuscope: a report of an older version is
exported with the tables and columns of this one, as ``gpuscope stats`` reads it). The report stays the single source: the folder is
derived and can be written again at any time.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import GpuscopeError
from . import schema
from .report import Report
from .report_errors import disk_full


def column_types(table: str) -> dict[str, str]:
    """Return the SQL type of each column of ``table``, in order."""
    return schema.column_types(table)


def write(report: Report, folder: Path) -> dict[str, int]:
    """Write every table of ``report`` into ``folder`` (created whole, or not at all: it is written
    under a temporary name and renamed); return the rows per table."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    # a fresh name of its own: nothing planted beside the output is written through
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent))
    counts: dict[str, int] = {}
    try:
        # a reading of its own that may write into the new folder, and nowhere else
        with Report.open(report.path, writable=[tmp]) as own, own.deadline():
            for table in schema.TABLES:
                target = str(tmp / f"{table}.parquet").replace("'", "''")
                cols = ", ".join(f'"{c}"' for c in schema.columns(table))
                own.con.execute(f"COPY (SELECT {cols} FROM {table}) TO '{target}' (FORMAT PARQUET, COMPRESSION ZSTD)")
                counts[table] = own.count(table)
        doc = {"format": "gpuscope-parquet", "schema_version": schema.SCHEMA_VERSION,
               "report_schema_version": report.meta.get("schema_version"),
               "source": str(report.path.name), "rows": counts,
               "tables": {t: column_types(t) for t in schema.TABLES}}
        (tmp / "schema.json").write_text(json.dumps(doc, indent=1) + "\n")
        if folder.is_symlink() or folder.is_file():
            folder.unlink()  # a link itself is replaced, never its target
        elif folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except OSError as exc:
        if disk_full(exc):
            raise GpuscopeError(f"the disk is full: cannot write {folder} ({exc.strerror})") from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return counts
