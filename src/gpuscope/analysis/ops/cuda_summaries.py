"""The CUDA summaries users know from ``nsys stats``, computed on a report.

Columns and meanings follow Nsight Systems' reports of the same names: Time (%) is a row's share of
the report's total; Med averages the two middle values of an even count; StdDev is the sample
standard deviation (0 for a single value). Rows are sorted by total time, then count, then name.
"""

from __future__ import annotations

from ...trace.report import Report
from ..table import Column, Table

STAT_COLUMNS = [
    Column("Total Time", "ns"),
    Column("Instances", "count"),
    Column("Avg", "ns"),
    Column("Med", "ns"),
    Column("Min", "ns"),
    Column("Max", "ns"),
    Column("StdDev", "ns"),
]

COPY_LABEL = {
    "HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "HtoA": "Host-to-Array",
    "AtoH": "Array-to-Host", "AtoA": "Array-to-Array", "AtoD": "Array-to-Device",
    "DtoA": "Device-to-Array", "DtoD": "Device-to-Device", "HtoH": "Host-to-Host",
    "PtoP": "Peer-to-Peer",
}  # fmt: skip


def _stats(expr: str) -> str:
    return (
        f"sum({expr}) AS total, count(*) AS n, avg({expr}) AS mean, median({expr}) AS med, "
        f"min({expr}) AS lo, max({expr}) AS hi, coalesce(stddev_samp({expr}), 0) AS sd"
    )


def _pct(total_col: str = "total") -> str:
    return f"100.0 * {total_col} / nullif(sum({total_col}) OVER (), 0) AS pct"


def _memop_sql() -> str:
    """One row per memory operation, named as Nsight Systems names it."""
    cases = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in COPY_LABEL.items())
    return f"""
        SELECT '[CUDA memcpy ' || (CASE copy_kind {cases} ELSE copy_kind END) || ']' AS name,
               end_ns - start_ns AS d, bytes
        FROM memcpy
        UNION ALL
        SELECT '[CUDA memset]' AS name, end_ns - start_ns AS d, bytes FROM memset"""


def _kernel_sql() -> str:
    return """
        SELECT c.name_id, k.end_ns - k.start_ns AS d
        FROM kernel k JOIN kernel_config c ON c.id = k.config_id"""


def _missing(report: Report, table: str, what: str) -> list[str]:
    if report.count(table):
        return []
    hint = report.not_recorded().get("cuda_api" if table == "api_call" else table)
    if hint:
        return [f"No {what} in this report: {hint}."]
    return [f"No {what} were recorded."]


def cuda_gpu_kern_sum(report: Report) -> Table:
    """Per kernel name: share of total kernel time, count and duration statistics."""
    rows = report.sql(
        f"""
        WITH g AS (SELECT name_id, {_stats('d')} FROM ({_kernel_sql()}) GROUP BY name_id)
        SELECT {_pct()}, total, n, mean, med, lo, hi, sd, s.value
        FROM g JOIN string s ON s.id = g.name_id
        ORDER BY total DESC, n, s.value"""
    )
    return Table(
        "cuda_gpu_kern_sum",
        "CUDA GPU Kernel Summary",
        [Column("Time", "percent"), *STAT_COLUMNS, Column("Name")],
        rows,
        _missing(report, "kernel", "kernels"),
    )


def _top_level_api_sql() -> str:
    """API calls, without driver calls made inside a runtime call of the same thread."""
    return """
        WITH rt AS (SELECT pid, tid, start_ns, end_ns FROM api_call WHERE domain = 'runtime'),
        drv AS (SELECT * FROM api_call WHERE domain = 'driver'),
        nested AS (
            SELECT drv.pid, drv.tid, drv.start_ns, drv.correlation_id
            FROM drv ASOF JOIN rt
              ON drv.pid = rt.pid AND drv.tid = rt.tid AND drv.start_ns >= rt.start_ns
            WHERE drv.end_ns <= rt.end_ns)
        SELECT a.* FROM api_call a
        ANTI JOIN nested USING (pid, tid, start_ns, correlation_id)
        WHERE a.domain = 'runtime' OR a.domain = 'driver'"""


def cuda_api_sum(report: Report) -> Table:
    """Per CUDA runtime/driver API function: share of API time, calls and duration statistics."""
    rows = report.sql(
        f"""
        WITH a AS ({_top_level_api_sql()}),
        g AS (SELECT name_id, {_stats('end_ns - start_ns')} FROM a GROUP BY name_id)
        SELECT {_pct()}, total, n, mean, med, lo, hi, sd, s.value
        FROM g JOIN string s ON s.id = g.name_id
        ORDER BY total DESC, n, s.value"""
    )
    cols = [Column("Time", "percent"), *STAT_COLUMNS, Column("Name")]
    cols[2] = Column("Num Calls", "count")
    return Table("cuda_api_sum", "CUDA API Summary", cols, rows, _missing(report, "api_call", "CUDA API calls"))


def cuda_gpu_mem_time_sum(report: Report) -> Table:
    """Per memory operation kind (copy direction, memset): time statistics."""
    rows = report.sql(
        f"""
        WITH g AS (SELECT name, {_stats('d')} FROM ({_memop_sql()}) GROUP BY name)
        SELECT {_pct()}, total, n, mean, med, lo, hi, sd, name FROM g
        ORDER BY total DESC, n, name"""
    )
    cols = [Column("Time", "percent"), *STAT_COLUMNS, Column("Operation")]
    cols[2] = Column("Count", "count")
    notes = [] if rows else ["No memory copies or sets were recorded."]
    return Table("cuda_gpu_mem_time_sum", "CUDA GPU MemOps Summary (by Time)", cols, rows, notes)


def cuda_gpu_mem_size_sum(report: Report) -> Table:
    """Per memory operation kind: size statistics (bytes)."""
    rows = report.sql(
        f"""
        WITH g AS (SELECT name, {_stats('bytes')} FROM ({_memop_sql()}) GROUP BY name)
        SELECT total, n, mean, med, lo, hi, sd, name FROM g
        ORDER BY total DESC, n, name"""
    )
    cols = [
        Column("Total", "bytes"),
        Column("Count", "count"),
        *(Column(c.label, "bytes") for c in STAT_COLUMNS[2:]),
        Column("Operation"),
    ]
    notes = [] if rows else ["No memory copies or sets were recorded."]
    return Table("cuda_gpu_mem_size_sum", "CUDA GPU MemOps Summary (by Size)", cols, rows, notes)


def cuda_gpu_sum(report: Report) -> Table:
    """Kernels and memory operations together ("GPU activities"): time statistics per name."""
    rows = report.sql(
        f"""
        WITH ops AS (
            SELECT 'CUDA_KERNEL' AS category, s.value AS name, d
            FROM ({_kernel_sql()}) k JOIN string s ON s.id = k.name_id
            UNION ALL
            SELECT 'MEMORY_OPER' AS category, name, d FROM ({_memop_sql()})),
        g AS (SELECT category, name, {_stats('d')} FROM ops GROUP BY category, name)
        SELECT {_pct()}, total, n, mean, med, lo, hi, sd, category, name FROM g
        ORDER BY total DESC, n, name"""
    )
    return Table(
        "cuda_gpu_sum",
        "CUDA GPU Summary (Kernels/MemOps)",
        [Column("Time", "percent"), *STAT_COLUMNS, Column("Category"), Column("Operation")],
        rows,
        [] if rows else ["No GPU activity was recorded."],
    )


def cuda_kern_exec_sum(report: Report) -> Table:
    """Per launching thread, API function and kernel: API, queue, kernel and total time statistics.

    A kernel is matched to the API call that launched it by correlation id. API time is the call's
    duration; queue time is from the call's return to the kernel's start (left out when the kernel
    started before the call returned); kernel time is the kernel's duration; total time runs from
    the call's start to whichever ends last.
    """
    stat = ("avg({0}), median({0}), min({0}), max({0}), coalesce(stddev_samp({0}), 0)").format
    rows = report.sql(
        f"""
        WITH launches AS (
            SELECT a.pid, a.tid, k.device_id, a.name_id AS api_id, c.name_id AS kern_id,
                   a.end_ns - a.start_ns AS api_d,
                   CASE WHEN k.start_ns >= a.end_ns THEN k.start_ns - a.end_ns END AS queue_d,
                   k.end_ns - k.start_ns AS kern_d,
                   greatest(a.end_ns, k.end_ns) - a.start_ns AS total_d
            FROM kernel k
            JOIN api_call a ON a.pid = k.pid AND a.correlation_id = k.correlation_id
            JOIN kernel_config c ON c.id = k.config_id),
        g AS (
            SELECT pid, tid, device_id, api_id, kern_id, count(*) AS n, count(queue_d) AS qn,
                   {stat('total_d')}, {stat('api_d')}, {stat('queue_d')}, {stat('kern_d')}
            FROM launches GROUP BY ALL)
        SELECT g.* EXCLUDE (api_id, kern_id), sa.value, sk.value
        FROM g JOIN string sa ON sa.id = g.api_id JOIN string sk ON sk.id = g.kern_id
        ORDER BY 6 DESC, sk.value"""
    )
    cols = [Column("PID", "id"), Column("TID", "id"), Column("DevId", "id")]
    cols += [Column("Count", "count"), Column("QCount", "count")]
    for prefix in ("T", "A", "Q", "K"):
        cols += [Column(f"{prefix}{s}", "ns") for s in ("Avg", "Med", "Min", "Max", "StdDev")]
    cols += [Column("API Name"), Column("Kernel Name")]
    notes = _missing(report, "api_call", "CUDA API calls")
    if not notes and not rows:
        notes = ["No kernel could be matched to the API call that launched it."]
    return Table("cuda_kern_exec_sum", "CUDA Kernel Launch & Exec Time Summary", cols, rows, notes)


REPORTS = {
    "cuda_gpu_kern_sum": cuda_gpu_kern_sum,
    "cuda_api_sum": cuda_api_sum,
    "cuda_gpu_mem_time_sum": cuda_gpu_mem_time_sum,
    "cuda_gpu_mem_size_sum": cuda_gpu_mem_size_sum,
    "cuda_gpu_sum": cuda_gpu_sum,
    "cuda_kern_exec_sum": cuda_kern_exec_sum,
}
