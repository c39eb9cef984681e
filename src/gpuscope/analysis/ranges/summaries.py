"""Summaries of ranges (NVTX, gpuscope annotations, PyTorch hooks): the CPU time they span, the GPU
work launched inside them, per layer and per step.

``nvtx_sum`` and ``nvtx_gpu_proj_sum`` follow Nsight Systems' reports of the same names, with two
differences: rows are grouped by range name and *source* (who recorded the range) instead of
NVTX's push/pop or start/end style, and a GPU operation is inside a range when its launch point
(:mod:`..ops.attribution`) is, not when its whole API call is. A range name is shown as
``domain:name`` for a named NVTX domain, followed by ``[category]`` when the range has one (so a
module's forward and backward ranges are separate rows).
"""

from __future__ import annotations

from collections.abc import Callable

from ...trace.report import Report
from ..ops.attribution import ops_table, range_tree_table, ranges_table
from ..ops.cuda_summaries import STAT_COLUMNS, _pct, _stats
from ..ops.enclosed import projection_table
from .layers import layer_sum
from ..steps.table import step_sum
from ..table import Column, Table

LABEL = """CASE WHEN d.value <> '' THEN d.value || ':' ELSE '' END || n.value
           || CASE WHEN coalesce(r.category, '') <> '' THEN ' [' || r.category || ']' ELSE '' END"""
NAMES = "JOIN string n ON n.id = r.name_id JOIN string d ON d.id = r.domain_id"


def _no_ranges(report: Report) -> list[str]:
    """The note of a report without ranges, with the option that records them where known."""
    hint = report.not_recorded().get("nvtx")
    return [f"No ranges in this report: {hint}." if hint else "No ranges were recorded."]


def _launch_note(report: Report) -> list[str]:
    if report.count("api_call"):
        return []
    return [
        (
            "No CUDA API calls in this report: GPU operations are placed by their queued time "
            "(memory operations by their start) on any thread of their process; add --trace cuda-api "
            "to place them by their launch call, on its thread."
        )
    ]


def nvtx_sum(report: Report) -> Table:
    """Per range name and source: share of the total range time, instances and duration statistics.

    Marks are left out. Ranges of every thread and process are pooled and nested ranges are not
    subtracted. A range that never ended counts in Instances but not in the times.
    """
    cols = [Column("Time", "percent"), *STAT_COLUMNS, Column("Source"), Column("Range")]
    if not report.count("nvtx_range"):
        return Table("nvtx_sum", "NVTX Range Summary", cols, [], _no_ranges(report))
    rows = report.sql(
        f"""
        WITH x AS (
            SELECT {LABEL} AS label, r.source, r.end_ns - r.start_ns AS d
            FROM nvtx_range r {NAMES} WHERE r.kind = 'range'),
        g AS (SELECT label, source, {_stats('d')}, count(*) - count(d) AS open FROM x GROUP BY label, source)
        SELECT {_pct()}, total, n, mean, med, lo, hi, sd, source, label, open FROM g
        ORDER BY total DESC NULLS LAST, n, label, source"""
    )
    notes = [] if rows else ["Only marks were recorded, no ranges."]
    never = sum(r[-1] for r in rows)
    if never:
        notes.append(f"{never} range(s) never ended: counted in Instances, left out of the times.")
    return Table("nvtx_sum", "NVTX Range Summary", cols, [r[:-1] for r in rows], notes)


def nvtx_gpu_proj_sum(report: Report) -> Table:
    """Per range name and source: the GPU projection of its instances.

    The projection of a range instance spans from the first start to the last end of the GPU
    operations launched inside it (at any depth, on its thread); instances without GPU operations
    are left out. Range Lvl is the instance's depth among the ranges of its thread (0: outermost);
    Num Child counts its direct children that have GPU operations. Children are not subtracted, so
    totals can exceed the capture's length.
    """
    cols = [
        Column("Range"), Column("Source"), Column("Total Proj Time", "ns"), Column("Total Range Time", "ns"),
        Column("Range Instances", "count"), Column("Proj Avg", "ns"), Column("Proj Med", "ns"),
        Column("Proj Min", "ns"), Column("Proj Max", "ns"), Column("Proj StdDev", "ns"),
        Column("Total GPU Ops", "count"), Column("Avg GPU Ops"), Column("Avg Range Lvl"), Column("Avg Num Child"),
    ]  # fmt: skip
    title = "NVTX GPU Projection Summary"
    if not report.count("nvtx_range"):
        return Table("nvtx_gpu_proj_sum", title, cols, [], _no_ranges(report))
    ops, ranges = ops_table(report), ranges_table(report)
    projected, tree = projection_table(report), range_tree_table(report)
    rows = report.sql(
        f"""
        WITH inst AS (SELECT rid, last_end - first_start AS proj, ops FROM {projected}),
        kids AS (
            SELECT t.parent AS rid, count(*) AS children
            FROM {tree} t JOIN inst USING (rid) GROUP BY t.parent),
        x AS (
            SELECT {LABEL} AS label, r.source, i.proj, r.end_ns - r.start_ns AS d, i.ops, t.level,
                   coalesce(k.children, 0) AS children
            FROM inst i JOIN {ranges} r USING (rid) JOIN {tree} t USING (rid) LEFT JOIN kids k USING (rid)
            {NAMES})
        SELECT label, source, sum(proj) AS total, sum(d), count(*) AS n, avg(proj), median(proj),
               min(proj), max(proj), coalesce(stddev_samp(proj), 0), sum(ops), round(avg(ops), 1),
               round(avg(level), 1), round(avg(children), 1)
        FROM x GROUP BY label, source
        ORDER BY total DESC, n, label, source"""
    )
    notes = _launch_note(report)
    if not rows:
        notes.insert(0, "No GPU operation was launched inside a range.")
    (elsewhere,) = report.sql(
        f"""SELECT count(*) FROM {ops} o
            WHERE o.tid IS NOT NULL AND o.pid IN (SELECT pid FROM {ranges})
              AND (o.pid, o.tid) NOT IN (SELECT (pid, tid) FROM {ranges})"""
    )[0]
    if elsewhere:
        notes.append("GPU operations launched by threads that recorded no ranges (such as autograd's "
                     f"worker thread) are in no range of this table: {elsewhere}.")
    return Table("nvtx_gpu_proj_sum", title, cols, rows, notes)


REPORTS: dict[str, Callable[[Report], Table]] = {
    "nvtx_sum": nvtx_sum,
    "nvtx_gpu_proj_sum": nvtx_gpu_proj_sum,
    "layer_sum": layer_sum,
    "step_sum": step_sum,
}
