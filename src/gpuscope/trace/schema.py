"""The report file's tables: one DuckDB database per run, documented in docs/report-format.md.

Every time is an integer number of nanoseconds on the session clock (CUPTI's timestamp clock when
CUPTI ran in the process, otherwise CLOCK_MONOTONIC shifted by ``process.clock_offset_ns``).
Strings that repeat (kernel names, API names, range names) live once in ``string`` and are referred
to by id; kernel launch configurations live once in ``kernel_config``.
"""

from __future__ import annotations

SCHEMA_VERSION = 9
FORMAT_NAME = "gpuscope-report"
FILE_SUFFIX = ".gpuscope"

TABLES: dict[str, str] = {
    "meta": """
        key VARCHAR PRIMARY KEY,
        value VARCHAR""",
    "string": """
        id INTEGER PRIMARY KEY,
        value VARCHAR NOT NULL""",
    "process": """
        pid BIGINT,
        ppid BIGINT,
        executable VARCHAR,
        argv VARCHAR,
        cwd VARCHAR,
        start_ns BIGINT,
        end_ns BIGINT,
        clock VARCHAR,
        clock_offset_ns BIGINT""",
    "device": """
        pid BIGINT,
        id INTEGER,
        name VARCHAR,
        compute_capability VARCHAR,
        sm_count INTEGER,
        global_memory_bytes BIGINT,
        memory_bandwidth_kbps BIGINT,
        core_clock_khz BIGINT,
        l2_cache_bytes BIGINT,
        max_threads_per_block INTEGER,
        max_shared_memory_per_block BIGINT,
        max_shared_memory_per_sm BIGINT,
        max_registers_per_sm INTEGER,
        max_warps_per_sm INTEGER,
        max_blocks_per_sm INTEGER,
        threads_per_warp INTEGER,
        memcpy_engines INTEGER""",
    "context": """
        pid BIGINT,
        id INTEGER,
        device_id INTEGER,
        null_stream_id INTEGER""",
    "kernel_config": """
        id INTEGER PRIMARY KEY,
        name_id INTEGER,
        mangled_id INTEGER,
        grid_x INTEGER, grid_y INTEGER, grid_z INTEGER,
        block_x INTEGER, block_y INTEGER, block_z INTEGER,
        cluster_x INTEGER, cluster_y INTEGER, cluster_z INTEGER,
        registers_per_thread INTEGER,
        static_shared_memory INTEGER,
        dynamic_shared_memory INTEGER,
        local_memory_per_thread INTEGER,
        local_memory_total BIGINT,
        shared_memory_executed INTEGER,
        launch_type INTEGER""",
    "kernel": """
        start_ns BIGINT,
        end_ns BIGINT,
        queued_ns BIGINT,
        submitted_ns BIGINT,
        pid BIGINT,
        device_id INTEGER,
        context_id INTEGER,
        stream_id INTEGER,
        correlation_id BIGINT,
        config_id INTEGER,
        graph_id BIGINT,
        graph_node_id BIGINT""",
    "memcpy": """
        start_ns BIGINT,
        end_ns BIGINT,
        pid BIGINT,
        device_id INTEGER,
        context_id INTEGER,
        stream_id INTEGER,
        correlation_id BIGINT,
        copy_kind VARCHAR,
        src_kind VARCHAR,
        dst_kind VARCHAR,
        bytes BIGINT,
        is_async BOOLEAN,
        graph_id BIGINT,
        graph_node_id BIGINT""",
    "memset": """
        start_ns BIGINT,
        end_ns BIGINT,
        pid BIGINT,
        device_id INTEGER,
        context_id INTEGER,
        stream_id INTEGER,
        correlation_id BIGINT,
        memory_kind VARCHAR,
        bytes BIGINT,
        value BIGINT,
        is_async BOOLEAN,
        graph_id BIGINT,
        graph_node_id BIGINT""",
    "api_call": """
        start_ns BIGINT,
        end_ns BIGINT,
        pid BIGINT,
        tid BIGINT,
        domain VARCHAR,
        cbid INTEGER,
        name_id INTEGER,
        correlation_id BIGINT,
        return_value INTEGER""",
    "sync": """
        start_ns BIGINT,
        end_ns BIGINT,
        pid BIGINT,
        context_id INTEGER,
        stream_id INTEGER,
        event_id BIGINT,
        type VARCHAR,
        correlation_id BIGINT,
        return_value INTEGER""",
    "overhead": """
        start_ns BIGINT,
        end_ns BIGINT,
        pid BIGINT,
        tid BIGINT,
        kind VARCHAR""",
    "nvtx_range": """
        start_ns BIGINT,
        end_ns BIGINT,
        pid BIGINT,
        tid BIGINT,
        id BIGINT,
        domain_id INTEGER,
        name_id INTEGER,
        kind VARCHAR,
        source VARCHAR,
        category VARCHAR,
        color VARCHAR""",
    "cpu_frame": """
        pid BIGINT,
        id INTEGER,
        file_id INTEGER,
        line INTEGER,
        function_id INTEGER""",
    "cpu_stack": """
        pid BIGINT,
        id INTEGER,
        parent_id INTEGER,
        frame_id INTEGER""",
    "cpu_sample": """
        ts_ns BIGINT,
        pid BIGINT,
        tid BIGINT,
        stack_id INTEGER,
        weight_ns BIGINT""",
    "thread_time": """
        ts_ns BIGINT,
        pid BIGINT,
        tid BIGINT,
        name VARCHAR,
        cpu_ns BIGINT""",
    "host_counter": """
        ts_ns BIGINT,
        pid BIGINT,
        name VARCHAR,
        value DOUBLE""",
    "collector": """
        pid BIGINT,
        name VARCHAR,
        records BIGINT,
        buffers BIGINT,
        callback_ns BIGINT,
        failed_records BIGINT,
        detail VARCHAR""",
    "dropped": """
        pid BIGINT,
        source VARCHAR,
        count BIGINT""",
    "torch_op": """
        start_ns BIGINT,
        end_ns BIGINT,
        pid BIGINT,
        tid BIGINT,
        name_id INTEGER,
        seq BIGINT,
        shapes VARCHAR,
        dtypes VARCHAR,
        out_shapes VARCHAR,
        scalars VARCHAR""",
    "sync_site": """
        start_ns BIGINT,
        end_ns BIGINT,
        pid BIGINT,
        tid BIGINT,
        api_name_id INTEGER,
        correlation_id BIGINT,
        stack_id INTEGER""",
    "launch_call": """
        start_ns BIGINT,
        end_ns BIGINT,
        pid BIGINT,
        tid BIGINT,
        api_name_id INTEGER,
        correlation_id BIGINT""",
    "graph_launch": """
        start_ns BIGINT,
        end_ns BIGINT,
        pid BIGINT,
        device_id INTEGER,
        context_id INTEGER,
        stream_id INTEGER,
        correlation_id BIGINT,
        graph_id BIGINT""",
    "kernel_metric": """
        name_id INTEGER,
        launch INTEGER,
        ncu_id INTEGER,
        metric VARCHAR,
        value DOUBLE,
        unit VARCHAR""",
    "capture_window": """
        pid BIGINT,
        start_ns BIGINT,
        end_ns BIGINT,
        reason VARCHAR""",
    "torch_op_window": """
        pid BIGINT,
        start_ns BIGINT,
        end_ns BIGINT,
        operators BIGINT,
        reason VARCHAR""",
    "memory_event": """
        ts_ns BIGINT,
        pid BIGINT,
        tid BIGINT,
        device_id INTEGER,
        kind VARCHAR,
        address BIGINT,
        bytes BIGINT,
        allocated_bytes BIGINT,
        reserved_bytes BIGINT,
        stream_id BIGINT,
        stack_id INTEGER,
        source VARCHAR""",
    "memory_oom": """
        ts_ns BIGINT,
        pid BIGINT,
        device_id INTEGER,
        requested_bytes BIGINT,
        free_bytes BIGINT,
        reserved_bytes BIGINT,
        allocated_bytes BIGINT,
        total_bytes BIGINT,
        detail VARCHAR""",
    "rank": """
        pid BIGINT,
        rank INTEGER,
        local_rank INTEGER,
        world_size INTEGER,
        node_rank INTEGER,
        host VARCHAR,
        backend VARCHAR,
        source VARCHAR""",
    "module_class": """
        pid BIGINT,
        name_id BIGINT,
        class_id BIGINT""",
    "diagnostic": """
        ts_ns BIGINT,
        pid BIGINT,
        level VARCHAR,
        message VARCHAR""",
    # The stats reports whose time grows with the GPU operations, computed once when the report is
    # closed (one row per report: its table as JSON text), with what they were computed from
    # (``basis``, JSON text); trace/stored_stats.py. Plain values: reading them runs nothing.
    "stats_summary": """
        name VARCHAR,
        basis VARCHAR,
        content VARCHAR""",
}


# Views that give a report of an older schema version the tables of this one (read-only upgrade);
# {db} is the report's catalog, so that a view can read the table it stands in for.
UPGRADES: dict[int, list[str]] = {
    1: [
        """CREATE TEMP VIEW nvtx_range AS
           SELECT *, 'nvtx' AS source, CAST(NULL AS VARCHAR) AS category,
                  CAST(NULL AS VARCHAR) AS color
           FROM "{db}".main.nvtx_range""",
    ],
}


# Tables that appeared in a version: a report of an older version reads them as empty.
ADDED_IN: dict[int, list[str]] = {
    3: ["cpu_frame", "cpu_stack", "cpu_sample", "thread_time", "host_counter"],
    4: ["torch_op", "sync_site", "launch_call", "graph_launch", "capture_window", "kernel_metric"],
    5: ["torch_op_window"],
    6: ["memory_event", "memory_oom"],
    7: ["rank"],
    8: ["module_class"],
    9: ["stats_summary"],
}


def upgrade_statements(version: int, db: str) -> list[str]:
    """Return the statements that let a read-only report of ``version`` be read as this version."""
    out = []
    for v in range(version, SCHEMA_VERSION):
        out += [stmt.format(db=db) for stmt in UPGRADES.get(v, [])]
        out += [f"CREATE TEMP TABLE {t} ({TABLES[t]}\n)" for t in ADDED_IN.get(v + 1, [])]
    return out


def create_statements() -> list[str]:
    """Return the DDL that creates an empty report of this schema version."""
    return [f"CREATE TABLE IF NOT EXISTS {name} ({cols}\n)" for name, cols in TABLES.items()]


def columns(table: str) -> list[str]:
    """Return the column names of ``table`` in their stored order."""
    out = []
    for line in TABLES[table].split(","):
        line = line.strip()
        if line:
            out.append(line.split()[0])
    return out


# Tables a report of any version may lack: it reads them as empty. ``kernel_metric`` is written by
# ``gpuscope kernels --ncu`` or ``--import``; reports of an earlier writer do not create it until then.
OPTIONAL_TABLES: tuple[str, ...] = ("kernel_metric",)

# Columns that appeared in a version (a report of an older version lacks them; UPGRADES adds them).
COLUMNS_ADDED_IN: dict[int, dict[str, tuple[str, ...]]] = {
    2: {"nvtx_range": ("source", "category", "color")},
}


def column_types(table: str) -> dict[str, str]:
    """Return the SQL type of each column of ``table`` (``{"start_ns": "BIGINT", ...}``), in order."""
    out = {}
    for line in TABLES[table].split(","):
        parts = line.split()
        if len(parts) >= 2:
            out[parts[0]] = parts[1]
    return out


def stored_columns(table: str, version: int) -> dict[str, str]:
    """Return the columns and types that ``table`` has in a report of schema ``version``, in order."""
    later = {c for v, added in COLUMNS_ADDED_IN.items() if v > version for c in added.get(table, ())}
    return {c: t for c, t in column_types(table).items() if c not in later}


def tables_of(version: int) -> tuple[list[str], list[str]]:
    """Return the tables a report of ``version`` must hold, and those it may lack (read as empty)."""
    later = {t for v, added in ADDED_IN.items() if v > version for t in added}
    required = [t for t in TABLES if t not in later and t not in OPTIONAL_TABLES]
    return required, [t for t in TABLES if t not in required]
