"""Trimming the memory tables to the capture windows, when the report is written (trim.py calls it).

Memory is recorded throughout the run, whatever the capture range (totals need every allocation
and free), and cut to the windows here. What a window keeps of each process's memory series
(one per device and source):

- the allocations, frees and segment events made inside it, with their running totals;
- a ``baseline`` row at its start: the totals (allocated, reserved) just before it, so that the
  window's peak and what each layer adds are measured from what was already held;
- the allocations made before it and still live at its start, as ``live`` rows at the time they
  were made (their layer and line stay known) without totals: they are listed among the largest
  live allocations at a peak, and a free inside the window ends them;
- for an out-of-memory error outside every window, the allocations live at the error the same way,
  so that its state still shows what was held.

A free outside every window stays (without totals) when its allocation stayed, so that an
allocation made in a window and freed after it is not counted live later. Everything else outside
the windows goes; ``memory_oom`` rows are kept whole.
"""

from __future__ import annotations

from typing import Any

_CLASSIFY = """
CREATE OR REPLACE TEMP TABLE gpuscope_memory_keep AS
WITH ev AS (
    SELECT rowid AS rid, pid, device_id, source, address, kind, ts_ns FROM memory_event
),
paired AS (
    SELECT *, lead(kind) OVER a AS next_kind, lead(ts_ns) OVER a AS next_ts, lag(kind) OVER a AS prev_kind,
           lag(rid) OVER a AS prev_rid
    FROM ev WHERE kind IN ('alloc', 'free') AND address IS NOT NULL
    WINDOW a AS (PARTITION BY pid, device_id, source, address ORDER BY ts_ns, rid)
),
points AS (
    SELECT pid, start_ns AS p FROM {windows} WHERE start_ns > 0
    UNION SELECT pid, ts_ns FROM memory_oom WHERE ts_ns IS NOT NULL
),
placed AS (
    SELECT e.*, EXISTS (SELECT 1 FROM {windows} w WHERE w.pid = e.pid
                        AND e.ts_ns BETWEEN w.start_ns AND w.end_ns) AS inside
    FROM ev e
)
SELECT p.rid, p.kind, p.inside,
       p.kind = 'alloc' AND NOT p.inside AND EXISTS (
           SELECT 1 FROM points q WHERE q.pid = p.pid AND p.ts_ns < q.p
           AND (x.next_kind IS NULL OR x.next_ts > q.p)) AS live,
       x.prev_kind, x.prev_rid
FROM placed p LEFT JOIN paired x USING (rid)
"""

_BASELINE = """
CREATE OR REPLACE TEMP TABLE gpuscope_memory_baseline AS
SELECT w.start_ns AS ts_ns, m.pid, m.device_id, m.source,
       arg_max(m.allocated_bytes, (m.ts_ns, m.rowid)) AS allocated_bytes,
       arg_max(m.reserved_bytes, (m.ts_ns, m.rowid)) AS reserved_bytes
FROM (SELECT DISTINCT pid, start_ns FROM {windows} WHERE start_ns > 0) w
JOIN memory_event m ON m.pid = w.pid AND m.ts_ns < w.start_ns AND m.allocated_bytes IS NOT NULL
GROUP BY w.start_ns, m.pid, m.device_id, m.source
"""


def trim_memory(con: Any, windows: str) -> int:
    """Cut ``memory_event`` to the windows of the temporary table ``windows`` (pid, start_ns, end_ns)
    as the module docstring says; return how many rows went."""
    if not con.execute("SELECT count(*) FROM memory_event").fetchone()[0]:
        return 0
    con.execute(_CLASSIFY.format(windows=windows))
    con.execute(_BASELINE.format(windows=windows))
    # a free outside the windows stays when its allocation stays (inside a window, or live at a point)
    con.execute("""
        CREATE OR REPLACE TEMP TABLE gpuscope_memory_frees AS
        SELECT f.rid FROM gpuscope_memory_keep f JOIN gpuscope_memory_keep a ON a.rid = f.prev_rid
        WHERE f.kind = 'free' AND NOT f.inside AND f.prev_kind = 'alloc' AND (a.inside OR a.live)""")
    con.execute("""
        UPDATE memory_event SET allocated_bytes = NULL, reserved_bytes = NULL
        WHERE rowid IN (SELECT rid FROM gpuscope_memory_frees)""")
    con.execute("""
        UPDATE memory_event SET kind = 'live', allocated_bytes = NULL, reserved_bytes = NULL
        WHERE rowid IN (SELECT rid FROM gpuscope_memory_keep WHERE live)""")
    (removed,) = con.execute("""
        DELETE FROM memory_event WHERE rowid IN (
            SELECT rid FROM gpuscope_memory_keep WHERE NOT inside AND NOT live
            AND rid NOT IN (SELECT rid FROM gpuscope_memory_frees))""").fetchone()
    con.execute("""
        INSERT INTO memory_event (ts_ns, pid, device_id, kind, bytes, allocated_bytes, reserved_bytes, source)
        SELECT ts_ns, pid, device_id, 'baseline', 0, allocated_bytes, reserved_bytes, source
        FROM gpuscope_memory_baseline""")
    for table in ("gpuscope_memory_keep", "gpuscope_memory_baseline", "gpuscope_memory_frees"):
        con.execute(f"DROP TABLE {table}")
    return int(removed)
