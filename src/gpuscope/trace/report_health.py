"""Whether a report's rows are ones gpuscope writes: asked after an analysis failed, to say whether
the report's data (NULLs where the writer always stores a value, times before the clock's start or
ending before they begin) or gpuscope itself is the cause."""

from __future__ import annotations

from . import schema
from .report import Report

# Columns the writer fills in every row (a NULL there is not a value a report holds).
_ALWAYS = {"start_ns", "ts_ns", "pid", "name_id", "config_id", "api_name_id"}
_ALWAYS_IN = {
    "string": ("id", "value"), "kernel_config": ("id",), "cpu_frame": ("id",), "cpu_stack": ("id", "parent_id", "frame_id"),
    "cpu_sample": ("stack_id",), "kernel": ("end_ns",), "memcpy": ("end_ns",), "memset": ("end_ns",),
    "api_call": ("end_ns",), "sync": ("end_ns",), "sync_site": ("end_ns",), "launch_call": ("end_ns",),
    "graph_launch": ("end_ns",), "meta": ("key", "value"),
}


def _checks(table: str) -> list[tuple[str, str]]:
    """Return (what, SQL condition of a bad row) for ``table``'s columns."""
    cols = schema.columns(table)
    out = [(f"NULLs in {table}.{c}", f'"{c}" IS NULL') for c in cols
           if c in _ALWAYS or c in _ALWAYS_IN.get(table, ())]
    for c in ("start_ns", "ts_ns"):
        if c in cols:
            out.append((f"negative times in {table}.{c}", f'"{c}" < 0'))
    if "start_ns" in cols and "end_ns" in cols:
        out.append((f"rows of {table} that end before they start", "end_ns < start_ns"))
    return out


def data_problem(report: Report) -> str | None:
    """Return the first thing in ``report``'s rows that gpuscope never writes, in words (None when
    its rows look as written)."""
    for table in schema.TABLES:
        checks = _checks(table)
        if not checks:
            continue
        counts = ", ".join(f"count(*) FILTER (WHERE {cond})" for _, cond in checks)
        row = report.sql(f"SELECT {counts} FROM {table}")[0]
        for (what, _), n in zip(checks, row):
            if n:
                return what
    return None
