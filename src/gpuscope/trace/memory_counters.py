"""Memory totals as counter samples: ``memory_event`` in, ``host_counter`` rows out, at the report's close.

Each process's allocated (and, for CUDA, reserved) total becomes the counters
``<device>.memory_allocated_bytes`` and ``<device>.memory_reserved_bytes`` (device ``cpu`` or ``gpuN``),
the names the Kineto importer gives PyTorch's memory events, and the CUDA-level allocations of CUPTI's
records (source ``cuda``: cudaMalloc and the like of any library) ``<device>.cuda_allocated_bytes``, so that the Chrome export and the
timeline viewer show them beside the host and GPU counters. A series longer than ``MAX_SAMPLES`` keeps
the highest sample of each of ``MAX_SAMPLES`` equal time buckets, so the peak is always among them.
"""

from __future__ import annotations

from typing import Any

MAX_SAMPLES = 100_000


def _series(column: str, suffix: str) -> str:
    return f"""
        SELECT pid, device_id, ts_ns, {column} AS value,
               CASE WHEN source = 'cuda' THEN 'cuda_allocated_bytes' ELSE '{suffix}' END AS suffix FROM memory_event
        WHERE {column} IS NOT NULL AND {column} >= 0"""


def store(con: Any) -> int:
    """Insert the memory counters of the memory events into ``host_counter``; return the samples stored."""
    before = con.execute("SELECT count(*) FROM host_counter").fetchone()[0]
    con.execute(f"""
        INSERT INTO host_counter (ts_ns, pid, name, value)
        WITH s AS ({_series('allocated_bytes', 'memory_allocated_bytes')}
                   UNION ALL {_series('reserved_bytes', 'memory_reserved_bytes')}),
             span AS (SELECT pid, device_id, suffix, count(*) AS n, min(ts_ns) AS t0,
                             greatest(max(ts_ns) - min(ts_ns), 1) AS width FROM s GROUP BY ALL),
             bucketed AS (SELECT s.*, CASE WHEN span.n <= {MAX_SAMPLES} THEN NULL
                                      ELSE (s.ts_ns - span.t0) * {MAX_SAMPLES} // span.width END AS bucket
                          FROM s JOIN span USING (pid, device_id, suffix))
        SELECT ts_ns, pid, CASE WHEN device_id < 0 THEN 'cpu' ELSE 'gpu' || device_id END || '.' || suffix,
               CAST(value AS DOUBLE) FROM bucketed WHERE bucket IS NULL
        UNION ALL
        SELECT arg_max(ts_ns, value), pid, CASE WHEN device_id < 0 THEN 'cpu' ELSE 'gpu' || device_id END || '.'
               || suffix, CAST(max(value) AS DOUBLE)
        FROM bucketed WHERE bucket IS NOT NULL GROUP BY pid, device_id, suffix, bucket""")
    return int(con.execute("SELECT count(*) FROM host_counter").fetchone()[0]) - int(before)
