"""The CPU side: where Python spent its time (sampled stacks), threads' CPU time, host counters.

Samples are wall time: each one stands for the time since its thread's previous sample, whether
the thread ran Python, waited in native code or slept. Self time goes to the innermost frame of a
sample; total time to every function on its stack (once per sample, even when recursive).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..trace.report import Report
from ..trace.stacks import short_path
from .table import Column, Table

HOTSPOT_COLUMNS = [
    Column("Self", "percent"), Column("Self Time", "ns"), Column("Total", "percent"),
    Column("Total Time", "ns"), Column("Samples", "count"),
]  # fmt: skip
UNDER_USED = 50.0  # percent of the cores' capacity below which the summary says cores are idle


@dataclass
class _Profile:
    total_ns: int
    by_function: dict[tuple[str, str], list[int]]  # (function, file) -> [self, total, samples]
    by_line: dict[tuple[str, str, int], list[int]]  # (function, file, line) -> [self, total, samples]


def _no_samples(report: Report) -> list[str]:
    hint = report.not_recorded().get("cpu")
    return [f"No Python stack samples in this report: {hint}." if hint else "No Python stack samples were recorded."]


def _profile(report: Report) -> _Profile:
    """Aggregate the samples by stack, then walk each distinct stack once."""
    frames = {(pid, fid): (func, file, line) for pid, fid, func, file, line in report.sql(
        """SELECT f.pid, f.id, fn.value, fl.value, f.line FROM cpu_frame f
           JOIN string fn ON fn.id = f.function_id JOIN string fl ON fl.id = f.file_id""")}
    parents = {(pid, sid): (parent, fid) for pid, sid, parent, fid in report.sql(
        "SELECT pid, id, parent_id, frame_id FROM cpu_stack")}
    by_function: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    by_line: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
    total = 0
    for pid, sid, weight, n in report.sql(
        "SELECT pid, stack_id, sum(weight_ns), count(*) FROM cpu_sample GROUP BY ALL"
    ):
        total += weight
        path = []
        node = sid
        while node and (pid, node) in parents:
            node, fid = parents[(pid, node)]
            path.append(frames[(pid, fid)])
        if not path:
            continue
        func, file, line = path[0]
        by_function[(func, file)][0] += weight
        by_line[(func, file, line)][0] += weight
        for fkey in {(f, fl) for f, fl, _ in path}:
            by_function[fkey][1] += weight
            by_function[fkey][2] += n
        for lkey in set(path):
            by_line[lkey][1] += weight
            by_line[lkey][2] += n
    return _Profile(int(total), dict(by_function), dict(by_line))


def _rows(items: dict[Any, list[int]], total: int, location: Callable[[Any], str]) -> list[tuple[Any, ...]]:
    rows = []
    for key, (self_ns, total_ns, n) in items.items():
        rows.append((100.0 * self_ns / total if total else 0.0, self_ns, 100.0 * total_ns / total if total else 0.0,
                     total_ns, n, key[0], location(key)))
    rows.sort(key=lambda r: (-r[1], -r[3], r[5]))
    return rows


def cpu_hotspots(report: Report) -> Table:
    """Per Python function: wall time with it innermost (self) and on the stack (total)."""
    cols = [*HOTSPOT_COLUMNS, Column("Function"), Column("File")]
    if not report.count("cpu_sample"):
        return Table("cpu_hotspots", "Python CPU Hotspots by Function", cols, [], _no_samples(report))
    p = _profile(report)
    rows = _rows(p.by_function, p.total_ns, lambda k: short_path(k[1]))
    notes = ["Wall time of sampled Python stacks of every thread; % of the sampled time."]
    return Table("cpu_hotspots", "Python CPU Hotspots by Function", cols, rows, notes)


def cpu_hotspots_lines(report: Report) -> Table:
    """Per source line: wall time with it the innermost frame (self) and on the stack (total)."""
    cols = [*HOTSPOT_COLUMNS, Column("Function"), Column("Line")]
    if not report.count("cpu_sample"):
        return Table("cpu_hotspots_lines", "Python CPU Hotspots by Line", cols, [], _no_samples(report))
    p = _profile(report)
    rows = _rows(p.by_line, p.total_ns, lambda k: f"{short_path(k[1])}:{k[2]}")
    return Table("cpu_hotspots_lines", "Python CPU Hotspots by Line", cols, rows,
                 ["Wall time of sampled Python stacks of every thread; % of the sampled time."])


def cpu_thread_sum(report: Report) -> Table:
    """Per thread: CPU time it used against the wall time it was seen, from /proc readings."""
    cols = [Column("PID", "id"), Column("TID", "id"), Column("Thread"), Column("CPU Time", "ns"),
            Column("Wall Time", "ns"), Column("CPU Use", "percent")]
    rows = report.sql(
        """SELECT pid, tid, any_value(name) FILTER (WHERE name <> ''), max(cpu_ns) - min(cpu_ns) AS cpu,
                  max(ts_ns) - min(ts_ns) AS wall,
                  100.0 * (max(cpu_ns) - min(cpu_ns)) / nullif(max(ts_ns) - min(ts_ns), 0)
           FROM thread_time GROUP BY pid, tid HAVING count(*) > 1 ORDER BY cpu DESC, tid"""
    )
    notes = [] if rows else _no_samples(report)
    return Table("cpu_thread_sum", "CPU Time per Thread", cols, rows, notes)


@dataclass
class HostSummary:
    """Headline host facts, in the spirit of an application performance snapshot."""

    cores: int
    process_cpu_percent: float  # mean over the run, percent of one core, all processes together
    machine_cpu_percent: float  # mean utilization of all cores (anything running on the machine)
    peak_rss_bytes: float
    max_threads: float

    @property
    def cores_used_percent(self) -> float:
        return self.process_cpu_percent / self.cores if self.cores else 0.0

    def advice(self) -> str:
        """One sentence about how the program used the machine's cores."""
        used = self.cores_used_percent
        text = (f"CPU utilization {used:.0f}% of {self.cores} cores "
                f"({self.process_cpu_percent / 100:.1f} cores busy on average)")
        if used < UNDER_USED:
            return text + ": the program may be under-using the cores (data loading, threads)."
        return text + "."


def host_summary(report: Report) -> HostSummary | None:
    """Return the host summary, or None when no host counters were recorded."""
    rows = dict(report.sql(
        """WITH per_ts AS (
               SELECT ts_ns, sum(value) FILTER (WHERE name = 'process.cpu_percent') AS cpu,
                      sum(value) FILTER (WHERE name = 'process.rss_bytes') AS rss,
                      sum(value) FILTER (WHERE name = 'process.threads') AS threads,
                      avg(value) FILTER (WHERE name LIKE 'cpu%.util_percent') AS machine
               FROM host_counter GROUP BY ts_ns)
           SELECT 'cpu', avg(cpu) FROM per_ts UNION ALL SELECT 'rss', max(rss) FROM per_ts
           UNION ALL SELECT 'threads', max(threads) FROM per_ts UNION ALL SELECT 'machine', avg(machine) FROM per_ts
           UNION ALL SELECT 'cores', count(DISTINCT name) FROM host_counter WHERE name LIKE 'cpu%.util_percent'"""
    ))
    if not rows.get("cores"):
        return None
    return HostSummary(int(rows["cores"]), float(rows["cpu"] or 0), float(rows["machine"] or 0),
                       float(rows["rss"] or 0), float(rows["threads"] or 0))


def host_sum(report: Report) -> Table:
    """Host and process counters over the run: CPU use, memory, threads, and one sentence of advice."""
    cols = [Column("Counter"), Column("Mean", "text"), Column("Peak", "text")]
    s = host_summary(report)
    if s is None:
        hint = report.not_recorded().get("host")
        return Table("host_sum", "Host Summary", cols, [],
                     [f"No host counters in this report: {hint}." if hint else "No host counters were recorded."])
    stats = dict(((name, kind), v) for name, kind, v in report.sql(
        """WITH per_ts AS (SELECT ts_ns, name, sum(value) AS v FROM host_counter
                           WHERE name LIKE 'process.%' GROUP BY ALL)
           SELECT name, 'mean', avg(v) FROM per_ts GROUP BY name
           UNION ALL SELECT name, 'peak', max(v) FROM per_ts GROUP BY name"""))
    rows = [
        ("Program CPU (% of one core)", f"{stats.get(('process.cpu_percent', 'mean'), 0):.1f}",
         f"{stats.get(('process.cpu_percent', 'peak'), 0):.1f}"),
        ("Program resident memory (MB)", f"{stats.get(('process.rss_bytes', 'mean'), 0) / 1e6:.0f}",
         f"{stats.get(('process.rss_bytes', 'peak'), 0) / 1e6:.0f}"),
        ("Program threads", f"{stats.get(('process.threads', 'mean'), 0):.1f}",
         f"{stats.get(('process.threads', 'peak'), 0):.0f}"),
        (f"Machine CPU (% of {s.cores} cores)", f"{s.machine_cpu_percent:.1f}", "-"),
    ]
    return Table("host_sum", "Host Summary", cols, rows, [s.advice()])


REPORTS = {
    "cpu_hotspots": cpu_hotspots,
    "cpu_hotspots_lines": cpu_hotspots_lines,
    "cpu_thread_sum": cpu_thread_sum,
    "host_sum": host_sum,
}
