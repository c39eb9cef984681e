"""Running totals of CUPTI's memory records (``memory_event`` rows of source ``cuda``), counted at the report's close.

CUPTI hands over each allocation and free on its own, in buffers that arrive out of order; the
total a row carries (``allocated_bytes``: the process's CUDA-level allocations on that device after
it) can only be counted once every record is in. A free is matched to the allocation before it at the
same address of the same process, and takes that allocation's device and size; a free of memory
allocated before recording started (nothing before it at that address) counts nothing, so no total
is negative. Pool records (``pool_create``/``pool_trim``/``pool_destroy``) carry no total.
"""

from __future__ import annotations

from typing import Any

from .decode import MEMORY_SOURCE

_PAIRED = f"""
    SELECT rowid AS rid, pid, device_id, ts_ns, kind, bytes,
           lag(kind) OVER a AS prev_kind, lag(device_id) OVER a AS prev_device, lag(bytes) OVER a AS prev_bytes
    FROM memory_event WHERE source = '{MEMORY_SOURCE}' AND kind IN ('alloc', 'free')
    WINDOW a AS (PARTITION BY pid, address ORDER BY ts_ns, rowid)"""


def fill(con: Any) -> int:
    """Set ``allocated_bytes`` of the CUDA-level allocations and frees that have none; return how many rows got one."""
    (todo,) = con.execute(f"""SELECT count(*) FROM memory_event WHERE source = '{MEMORY_SOURCE}'
                              AND kind IN ('alloc', 'free') AND allocated_bytes IS NULL""").fetchone()
    if not todo:
        return 0
    con.execute(f"""
        UPDATE memory_event SET device_id = p.prev_device FROM ({_PAIRED}) p
        WHERE memory_event.rowid = p.rid AND p.kind = 'free' AND p.prev_kind = 'alloc'
              AND p.prev_device IS DISTINCT FROM p.device_id""")
    con.execute(f"""
        UPDATE memory_event SET allocated_bytes = t.total FROM (
            SELECT rid, greatest(0, sum(delta) OVER (PARTITION BY pid, device_id ORDER BY ts_ns, rid
                                                     ROWS UNBOUNDED PRECEDING)) AS total
            FROM (SELECT rid, pid, device_id, ts_ns,
                         CASE WHEN kind = 'alloc' THEN bytes
                              WHEN prev_kind = 'alloc' THEN -prev_bytes ELSE 0 END AS delta
                  FROM ({_PAIRED}))) t
        WHERE memory_event.rowid = t.rid""")
    return int(todo)
