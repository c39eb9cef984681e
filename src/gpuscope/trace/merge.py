"""Several report files of one run (one per node of a multi-node job) as one report file.

Each source report's rows are copied into a new report with three changes, so that the result reads
as if one profiler had recorded every node:

- its times are shifted by the clock offset given for it (``start_ns``, ``end_ns``, ``ts_ns``;
  ``queued_ns`` and ``submitted_ns`` where CUPTI gave one, that is not 0);
- its strings are interned once with those of the reports before it (a name has one id), and its
  kernel configuration ids follow those of the reports before it;
- its process ids are shifted by ``pid_shift`` (a multiple of :data:`PID_STRIDE`) where it shares a
  pid with an earlier report (containers on several nodes start their processes with the same pids).

Everything else that refers to a process (stacks, frames, contexts, correlation ids) is keyed by pid
and stays valid. ``meta`` is that of the first report, with ``merged_from`` saying which report each
process came from, the offset applied to it and how it was found. Source reports are only read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from ..errors import GpuscopeError
from . import outputs, report_catalog, schema

PID_STRIDE = 10_000_000  # above Linux's largest pid (4,194,304): a shifted pid reads as report number + pid
STRING_IDS = {"name_id", "mangled_id", "domain_id", "file_id", "function_id", "api_name_id", "class_id"}
TIMES = {"start_ns", "end_ns", "ts_ns"}
OPTIONAL_TIMES = {"queued_ns", "submitted_ns"}  # 0: CUPTI gave none


@dataclass
class MergeSource:
    """One report to merge: its path, the nanoseconds to add to its times, the pid shift, and what
    to say about its clock (``clock_method``: how the offset was found; ``clock_spread_ns``: its
    uncertainty where known)."""

    path: Path
    offset_ns: int = 0
    pid_shift: int = 0
    host: str | None = None
    clock_method: str = "reference"
    clock_spread_ns: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def pid_shifts(pids: list[set[int]]) -> list[int]:
    """The shift of each report's pids: 0, or ``i * PID_STRIDE`` for report ``i`` where one of its
    pids is already used by an earlier report."""
    taken: set[int] = set()
    out = []
    for i, own in enumerate(pids):
        shift = i * PID_STRIDE if own & taken else 0
        out.append(shift)
        taken |= {p + shift for p in own}
    return out


def _check(con: duckdb.DuckDBPyConnection, db: str, src: MergeSource) -> None:
    """Raise GpuscopeError unless the attached ``db`` holds only a report's tables (nothing that runs
    when read: report_catalog.py), as Report.open checks before reading a report."""
    version = src.meta.get("schema_version")
    try:
        report_catalog.check(con, db)
        report_catalog.check_tables(con, db, version if isinstance(version, int) else schema.SCHEMA_VERSION)
    except report_catalog.CatalogProblem as problem:
        what = "damaged report" if problem.damaged else "not a gpuscope report"
        raise GpuscopeError(f"{src.path}: {what}: {problem}") from None


def _columns(con: duckdb.DuckDBPyConnection, db: str, table: str) -> list[str]:
    rows = con.execute("SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND table_name = ? "
                       "ORDER BY column_index", [db, table]).fetchall()
    return [r[0] for r in rows]


def _select(columns: list[str], table: str, src: MergeSource, config_base: int) -> str:
    out = []
    for c in columns:
        if c in ("pid", "ppid"):
            expr = f"{c} + {src.pid_shift}"
        elif c in TIMES:
            expr = f"{c} + {src.offset_ns}"
        elif c in OPTIONAL_TIMES:
            expr = f"CASE WHEN {c} = 0 THEN {c} ELSE {c} + {src.offset_ns} END"
        elif c in STRING_IDS:
            expr = f"(SELECT new FROM string_map WHERE old = {c})"
        elif c == "config_id" or (table == "kernel_config" and c == "id"):
            expr = f"{c} + {config_base}"
        else:
            expr = c
        out.append(f"{expr} AS {c}")
    return ", ".join(out)


def _intern(con: duckdb.DuckDBPyConnection, db: str) -> None:
    """Add the strings of ``db`` that the merged report lacks, and map each of its ids to the merged one."""
    con.execute(f"""INSERT INTO main.string
                    SELECT (SELECT coalesce(max(id) + 1, 0) FROM main.string) + row_number() OVER (ORDER BY id) - 1,
                           value
                    FROM (SELECT min(id) AS id, value FROM {db}.main.string
                          WHERE value NOT IN (SELECT value FROM main.string) GROUP BY value)""")
    con.execute("DELETE FROM string_map")
    con.execute(f"""INSERT INTO string_map SELECT s.id, m.id FROM {db}.main.string s
                    JOIN main.string m ON m.value = s.value""")


def merge(sources: list[MergeSource], output: Path) -> None:
    """Write the reports of ``sources`` into the new report file ``output`` (which must not exist)."""
    outputs.create_report(output, force=False)
    con = duckdb.connect(str(output), config={"autoinstall_known_extensions": False,
                                              "autoload_known_extensions": False})
    try:
        for stmt in schema.create_statements():
            con.execute(stmt)
        config_base = 0
        merged = []
        con.execute("CREATE TEMP TABLE string_map (old INTEGER, new INTEGER)")
        for i, src in enumerate(sources):
            db = f"src{i}"
            con.execute(f"ATTACH '{str(src.path).replace(chr(39), chr(39) * 2)}' AS {db} (READ_ONLY)")
            _check(con, db, src)
            _intern(con, db)
            for table in schema.TABLES:
                if table in ("meta", "string", "stats_summary"):  # a merged report's tables are its own
                    continue
                columns = [c for c in _columns(con, db, table) if c in schema.columns(table)]
                if not columns:  # a table of a later schema version than the report's
                    continue
                select = _select(columns, table, src, config_base)
                con.execute(f"INSERT INTO main.{table} BY NAME SELECT {select} FROM {db}.main.{table}")
            top_config = con.execute(f"SELECT coalesce(max(id) + 1, 0) FROM {db}.main.kernel_config").fetchone()[0]
            config_base += int(top_config)  # type: ignore[index]
            con.execute(f"DETACH {db}")
            merged.append({"report": src.path.name, "host": src.host, "command": src.meta.get("command"),
                           "clock_offset_ns": src.offset_ns, "clock_method": src.clock_method,
                           "clock_spread_ns": src.clock_spread_ns, "pid_shift": src.pid_shift,
                           "status": src.meta.get("status")})
        meta = dict(sources[0].meta)
        meta.update(schema_version=schema.SCHEMA_VERSION, merged_from=merged,
                    status="complete" if all(s.meta.get("status") == "complete" for s in sources) else "recording",
                    processes=sorted(p for (p,) in con.execute("SELECT DISTINCT pid FROM process").fetchall()),
                    wall_ns=max((int(s.meta.get("wall_ns") or 0) for s in sources), default=0))
        con.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()])
        con.execute("CHECKPOINT")
    except (duckdb.Error, GpuscopeError) as exc:
        con.close()
        output.unlink(missing_ok=True)
        if isinstance(exc, GpuscopeError):
            raise
        raise GpuscopeError(f"cannot merge the reports into {output}: {str(exc).splitlines()[0]}") from None
    con.close()
