"""Trimming a report to its capture windows, when it is written.

Collection is turned off outside the windows of a capture range, but not instantaneously: CUPTI
may still deliver records of work launched just before it was enabled or just after it was
disabled, and a range recorder may hand over a range that began earlier. So the writer keeps,
per process, only what was *launched* (or began, for host-side records) inside one of that
process's windows, as ``capture_window`` says:

- kernels, memory copies and sets by their launch point (trace/launch.py, as the analyses place
  them); graph launches by their API call, else their GPU start;
- API calls, synchronizations, synchronization sites, launch calls, operators and ranges by their
  start; Python samples by their time; host counters by their time, against every window;
- step marks are kept whatever their time, so that steps keep their numbers (step_sum shows only
  the steps that lie inside a window);
- memory events as memory_trim.py says: those of the windows, with each window's baseline and
  the allocations live at its start.

Processes, devices, contexts, CUPTI overhead records, collector counts, thread CPU times and
diagnostics are kept whole. A report whose capture range was limited (``meta.capture_range``)
keeps nothing launched by a process that had no window; otherwise only processes with windows (a
run recorded whole that ``gpuscope.stop()`` paused) are trimmed.
"""

from __future__ import annotations

import json
from typing import Any

from .launch import anchor_joins, anchored_start
from .memory_trim import trim_memory

FOREVER = 9_223_372_036_854_775_807
WINDOWS = "gpuscope_capture_windows"

# table -> (join, launch-time expression); ``t`` is the table, ``a`` its launching API call
_API = "LEFT JOIN api_call a ON a.pid = t.pid AND a.correlation_id = t.correlation_id"
_ANCHORED = _API + anchor_joins("t")
_TRIMMED: dict[str, tuple[str, str]] = {
    "kernel": (_ANCHORED, f"coalesce(a.start_ns, nullif(t.queued_ns, 0), {anchored_start('t')})"),
    "memcpy": (_ANCHORED, f"coalesce(a.start_ns, {anchored_start('t')})"),
    "memset": (_ANCHORED, f"coalesce(a.start_ns, {anchored_start('t')})"),
    "graph_launch": (_API, "coalesce(a.start_ns, t.start_ns)"),
    "api_call": ("", "t.start_ns"),  # after the tables that need it for their launch times
    "sync": ("", "t.start_ns"),
    "sync_site": ("", "t.start_ns"),
    "launch_call": ("", "t.start_ns"),
    "torch_op": ("", "t.start_ns"),
    "nvtx_range": ("", "t.start_ns"),
    "cpu_sample": ("", "t.ts_ns"),
}
_KEEP = {"nvtx_range": "t.kind = 'mark' AND t.category IN ('step', 'iteration')"}


PROBE_CLOSES = "overhead probe at step"  # how a window closed by the overhead probe names it (capture/process/window.py)
PACE_CLOSES = "overhead probe at CUDA graph launch"  # and one closed by the probe paced by graph launches


def probes_only(con: Any) -> bool:
    """Whether every window of the report that closed before its process ended was closed by the
    overhead probe (a run recorded whole but for the probe's few steps); False without windows."""
    closes = [str(r or "").rpartition(" to ")[2] for (r,) in con.execute(
        "SELECT reason FROM capture_window WHERE end_ns IS NOT NULL").fetchall()]
    return bool(closes) and all(PROBE_CLOSES in c or PACE_CLOSES in c or c == "process end" for c in closes)


def capture_limited(meta: dict[str, Any]) -> bool:
    """Whether the report's capture range limited every process (``meta.capture_range``)."""
    capture = meta.get("capture_range")
    return bool(isinstance(capture, dict) and capture.get("limited"))


def windows_query(all_limited: bool) -> str:
    """SQL for ``(pid, start_ns, end_ns)``: each process's capture windows (a window still open at
    the end runs to the end of time), and one window over all time for a process recorded whole."""
    query = f"SELECT pid, start_ns, coalesce(end_ns, {FOREVER}) AS end_ns FROM capture_window"
    if not all_limited:
        query += (f" UNION ALL SELECT DISTINCT pid, 0, {FOREVER} FROM process"
                  " WHERE pid NOT IN (SELECT pid FROM capture_window)")
    return query


def _tables(con: Any) -> set[str]:
    return {name for (name,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}


def trim(con: Any) -> dict[str, int]:
    """Delete what lies outside the capture windows (see the module docstring); return how many
    rows of each table went. Does nothing for a report recorded whole."""
    meta = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}
    all_limited = capture_limited(meta)
    if not all_limited and not con.execute("SELECT count(*) FROM capture_window").fetchone()[0]:
        return {}
    con.execute(f"CREATE OR REPLACE TEMP TABLE {WINDOWS} AS {windows_query(all_limited)}")
    present = _tables(con)
    removed: dict[str, int] = {}
    for table, (join, launch) in _TRIMMED.items():
        if table not in present or (join and "api_call" not in present):
            continue
        keep = f" AND NOT ({_KEEP[table]})" if table in _KEEP else ""
        (n,) = con.execute(
            f"""DELETE FROM {table} WHERE rowid IN (
                    SELECT t.rowid FROM {table} t {join}
                    WHERE NOT EXISTS (SELECT 1 FROM {WINDOWS} w WHERE w.pid = t.pid
                                      AND {launch} BETWEEN w.start_ns AND w.end_ns){keep})"""
        ).fetchone()
        if n:
            removed[table] = int(n)
    if "memory_event" in present and (all_limited or not probes_only(con)):  # a probe's steps keep their memory
        n = trim_memory(con, WINDOWS)  # allocations in the windows, with what was live at their starts
        if n:
            removed["memory_event"] = n
    if all_limited:
        (n,) = con.execute(
            f"""DELETE FROM host_counter WHERE NOT EXISTS (
                    SELECT 1 FROM {WINDOWS} w WHERE host_counter.ts_ns BETWEEN w.start_ns AND w.end_ns)"""
        ).fetchone()
        if n:
            removed["host_counter"] = int(n)
    con.execute(f"DROP TABLE {WINDOWS}")
    return removed
