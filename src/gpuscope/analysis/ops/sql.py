"""The SQL that reads the GPU operations with their launch points: the operations placed by their
launch anchors, and every operation joined to them, in no order (attribution.py orders them in a
table, op_rows.py in numpy)."""

from __future__ import annotations

from ...trace.launch import anchor_joins, anchored_start


def op_queries(placed_table: str) -> tuple[str, str]:
    """The SQL of the operations placed by their anchors (made as ``placed_table``), and that of
    every operation with its launch point, in no order, which joins them (see ``ops_table``)."""
    # Anchors are looked up only for the operations placed by nothing else, on three columns, and
    # for those of every kind at once: an as-of join sorts its whole anchor side (ten million rows
    # in a long run), so one pair of them serves kernels, copies and sets.
    # The placed rows are one per key, so an operation placed otherwise may meet one of them and keep
    # its own launch point (coalesce); a condition on ``b.known`` in the join made DuckDB 1.x join by
    # a nested loop (a 500,000-kernel report: minutes where the hash join takes 0.1 s).
    def joined(base: str) -> str:
        return (f"{base} b LEFT JOIN {placed_table} p ON p.pid IS NOT DISTINCT FROM b.pid "
                "AND p.correlation_id IS NOT DISTINCT FROM b.correlation_id AND p.start_ns IS NOT DISTINCT FROM b.start_ns")

    bases = """
        kb AS NOT MATERIALIZED (
            SELECT k.pid, k.correlation_id, coalesce(a.tid, g.tid) AS tid,
                   coalesce(a.start_ns, g.start_ns, nullif(k.queued_ns, 0)) AS known,
                   k.start_ns, k.end_ns, k.device_id, c.name_id, k.config_id, k.stream_id
            FROM kernel k JOIN kernel_config c ON c.id = k.config_id
            LEFT JOIN api_call a ON a.pid = k.pid AND a.correlation_id = k.correlation_id
            LEFT JOIN launch_call g ON g.pid = k.pid AND g.correlation_id = k.correlation_id),
        cb AS NOT MATERIALIZED (
            SELECT m.pid, m.correlation_id, a.tid, a.start_ns AS known, m.start_ns, m.end_ns, m.device_id,
                   m.copy_kind, m.stream_id
            FROM memcpy m LEFT JOIN api_call a ON a.pid = m.pid AND a.correlation_id = m.correlation_id),
        sb AS NOT MATERIALIZED (
            SELECT m.pid, m.correlation_id, a.tid, a.start_ns AS known, m.start_ns, m.end_ns, m.device_id,
                   m.stream_id
            FROM memset m LEFT JOIN api_call a ON a.pid = m.pid AND a.correlation_id = m.correlation_id)"""
    query = f"""
        WITH {bases},
        ops AS (
            SELECT 'kernel' AS kind, b.pid, b.tid, coalesce(b.known, p.anchored) AS launch_ns,
                   b.start_ns, b.end_ns, b.device_id, b.name_id, CAST(NULL AS VARCHAR) AS copy_kind, b.config_id,
                   b.stream_id, b.correlation_id
            FROM {joined('kb')}
            UNION ALL
            SELECT 'memcpy', b.pid, b.tid, coalesce(b.known, p.anchored), b.start_ns, b.end_ns,
                   b.device_id, NULL, b.copy_kind, NULL, b.stream_id, b.correlation_id
            FROM {joined('cb')}
            UNION ALL
            SELECT 'memset', b.pid, b.tid, coalesce(b.known, p.anchored), b.start_ns, b.end_ns,
                   b.device_id, NULL, NULL, NULL, b.stream_id, b.correlation_id
            FROM {joined('sb')}
            UNION ALL
            SELECT 'graph', g.pid, coalesce(a.tid, lc.tid), coalesce(a.start_ns, lc.start_ns, g.start_ns),
                   g.start_ns, g.end_ns, g.device_id, NULL, NULL, NULL, g.stream_id, g.correlation_id
            FROM graph_launch g LEFT JOIN api_call a ON a.pid = g.pid AND a.correlation_id = g.correlation_id
            LEFT JOIN launch_call lc ON lc.pid = g.pid AND lc.correlation_id = g.correlation_id)
        SELECT * FROM ops"""
    placed = f"""
        WITH {bases},
        unplaced AS (
            SELECT DISTINCT pid, correlation_id, start_ns FROM (
                SELECT pid, correlation_id, start_ns FROM kb WHERE known IS NULL
                UNION ALL SELECT pid, correlation_id, start_ns FROM cb WHERE known IS NULL
                UNION ALL SELECT pid, correlation_id, start_ns FROM sb WHERE known IS NULL))
        SELECT x.pid, x.correlation_id, x.start_ns, {anchored_start('x')} AS anchored
        FROM unplaced x {anchor_joins('x')}"""
    return placed, query
