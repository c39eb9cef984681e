"""The fleet summaries, each as a per-report *partial* (SQL over one report's tables, a row per
process and key) and a *combine* across reports, written twice: in SQL (DuckDB reads every report's
Parquet files in one query) and in pandas (Dask runs the partials as tasks, the client combines).

A partial's SQL names tables as ``{kernel}``, ``{kernel_config}``, ...: for DuckDB they are all
reports' files at once, with a ``src`` column (the report's number); for a Dask task one report's
files, with its number as a constant.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

# per (src, pid, kernel name): launches, time, shortest and longest
KERN_PARTIAL = """
    WITH per AS (
        SELECT src, pid, config_id, count(*) AS n, sum(end_ns - start_ns) AS total,
               min(end_ns - start_ns) AS shortest, max(end_ns - start_ns) AS longest
        FROM {kernel} GROUP BY ALL)
    SELECT p.src, p.pid, s.value AS name, sum(p.n) AS n, sum(p.total) AS total, min(p.shortest) AS shortest,
           max(p.longest) AS longest
    FROM per p JOIN {kernel_config} c ON c.src = p.src AND c.id = p.config_id
    JOIN {string} s ON s.src = c.src AND s.id = c.name_id
    GROUP BY ALL"""

KERN_COMBINE = """
    SELECT {key} name, sum(n)::BIGINT AS instances, sum(total)::BIGINT AS total, sum(total) / sum(n) AS mean,
           min(shortest)::BIGINT AS shortest, max(longest)::BIGINT AS longest, count(*)::BIGINT AS processes,
           min(total)::BIGINT AS least_process, max(total)::BIGINT AS most_process
    FROM partial GROUP BY ALL"""

# per (src, pid) with GPU work, collectives or a rank
RANK_PARTIAL = """
    WITH k AS (
        SELECT k.src, k.pid, count(*) AS kernels, sum(k.end_ns - k.start_ns) AS gpu_ns,
               sum(k.end_ns - k.start_ns) FILTER (WHERE s.value LIKE 'nccl%Kernel%') AS nccl_ns,
               count(*) FILTER (WHERE s.value LIKE 'nccl%Kernel%') AS nccl_n
        FROM {kernel} k JOIN {kernel_config} c ON c.src = k.src AND c.id = k.config_id
        JOIN {string} s ON s.src = c.src AND s.id = c.name_id GROUP BY ALL),
    o AS (
        SELECT o.src, o.pid, count(*) AS ops_n, sum(o.end_ns - o.start_ns) AS ops_ns
        FROM {torch_op} o JOIN {string} s ON s.src = o.src AND s.id = o.name_id
        WHERE s.value LIKE '%c10d%' AND s.value NOT LIKE '%wait%' GROUP BY ALL),
    p AS (SELECT src, pid FROM k UNION SELECT src, pid FROM o UNION SELECT src, pid FROM {rank})
    SELECT p.src, p.pid, r.rank, r.host, coalesce(k.kernels, 0) AS kernels, coalesce(k.gpu_ns, 0) AS gpu_ns,
           coalesce(k.nccl_ns, 0) AS comm_ns, coalesce(k.nccl_n, 0) + coalesce(o.ops_n, 0) AS collectives
    FROM p LEFT JOIN {rank} r USING (src, pid) LEFT JOIN k USING (src, pid) LEFT JOIN o USING (src, pid)"""

RANK_COMBINE = """
    SELECT {key} src, rank, pid, host, kernels::BIGINT AS kernels, gpu_ns::BIGINT AS gpu_ns,
           comm_ns::BIGINT AS comm_ns, collectives::BIGINT AS collectives
    FROM partial"""


def _kern_combine(partial: pd.DataFrame, by_report: bool) -> pd.DataFrame:
    keys = (["report"] if by_report else []) + ["name"]
    g = partial.groupby(keys, sort=False)
    out = g.agg(instances=("n", "sum"), total=("total", "sum"), shortest=("shortest", "min"),
                longest=("longest", "max"), processes=("total", "size"), least_process=("total", "min"),
                most_process=("total", "max")).reset_index()
    out["mean"] = out["total"] / out["instances"]
    return out[keys + ["instances", "total", "mean", "shortest", "longest", "processes", "least_process",
                       "most_process"]]


def _rank_combine(partial: pd.DataFrame, by_report: bool) -> pd.DataFrame:
    keys = ["report"] if by_report else []
    return partial[keys + ["src", "rank", "pid", "host", "kernels", "gpu_ns", "comm_ns", "collectives"]].copy()


@dataclass(frozen=True)
class FleetQuery:
    """One fleet summary: its partial SQL, its combine in SQL and in pandas, and its row order."""

    name: str
    partial: str
    tables: tuple[str, ...]
    combine_sql: str
    combine_pandas: object  # (partial frame, by_report) -> frame
    order: tuple[str, ...]
    ascending: tuple[bool, ...]

    def finish(self, frame: pd.DataFrame, by_report: bool) -> pd.DataFrame:
        """The combined rows in this summary's order, with a fresh index."""
        order = [c for c in (("report",) if by_report else ()) + self.order]
        asc = [True] * (len(order) - len(self.order)) + list(self.ascending)
        if "src" in frame.columns:  # the same pid in two reports: in the order the reports were given
            order, asc = order + ["src"], asc + [True]
        frame = frame.sort_values(order, ascending=asc, kind="stable", na_position="last")
        return frame.drop(columns=[c for c in ("src",) if c in frame.columns]).reset_index(drop=True)


QUERIES = {
    "fleet_kern_sum": FleetQuery("fleet_kern_sum", KERN_PARTIAL, ("kernel", "kernel_config", "string"), KERN_COMBINE,
                                 _kern_combine, ("total", "name"), (False, True)),
    "fleet_rank_sum": FleetQuery("fleet_rank_sum", RANK_PARTIAL, ("kernel", "kernel_config", "string", "torch_op",
                                                                    "rank"),
                                 RANK_COMBINE, _rank_combine, ("rank", "pid"), (True, True)),
}
