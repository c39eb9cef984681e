"""The CPU side: where Python spent its time (sampled stacks), threads' CPU time, host counters.

Each sample stands for the wall time since its thread's previous sample, and for its share of the
thread's CPU time (:mod:`.profile`). Self time goes to the innermost frame shown (the program's
own line, library time folded into it); total time to every function on its stack (once per sample,
even when recursive). Rows are ranked by CPU time: a sleeping thread is not a hotspot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...trace.report import Report
from ...trace.stacks import short_path
from .profile import CpuProfile, cpu_profile, rate_note
from ..table import Column, Table

HOTSPOT_COLUMNS = [
    Column("CPU Self", "ns"), Column("CPU", "percent"), Column("Wall Self", "ns"), Column("CPU Total", "ns"),
    Column("Wall Total", "ns"), Column("Samples", "count"),
]  # fmt: skip
UNDER_USED = 50.0  # percent of the cores' capacity below which the summary says cores are idle
BUSY_MACHINE = 80.0  # percent of all cores busy (any program) above which idle cores are not the program's choice
MIN_ADVICE_S = 2.0  # runs shorter than this get no advice on core use (start-up dominates them)


def _no_samples(report: Report) -> list[str]:
    hint = report.not_recorded().get("cpu")
    return [f"No Python stack samples in this report: {hint}." if hint else "No Python stack samples were recorded."]


def _rows(items: dict[Any, list[float]], p: CpuProfile, location: Callable[[Any], str]) -> list[tuple[Any, ...]]:
    rows = []
    for key, (self_wall, self_cpu, total_wall, total_cpu, n) in items.items():
        if not n:
            continue
        cpu = (lambda v: v) if p.has_cpu else (lambda v: None)
        rows.append((cpu(self_cpu), cpu(100.0 * self_cpu / p.cpu_ns if p.cpu_ns else 0.0), self_wall,
                     cpu(total_cpu), total_wall, n, key[0], location(key)))
    rows.sort(key=lambda r: (-(r[0] or 0), -r[2], -(r[3] or 0), r[6], r[7]))
    return rows


def _notes(p: CpuProfile, libraries: bool) -> list[str]:
    notes = [("CPU: the thread's CPU time, read every 0.1 s, shared among its samples by wall time; Wall: "
              "time the stacks were seen, whether running, waiting or asleep. CPU %: of all sampled CPU time."
              if p.has_cpu else "Wall time of sampled stacks (no threads' CPU times in this report)."),
             ("Library and standard-library frames are shown as they are (--libraries)." if libraries else
              "Time in libraries counts to the line of the program that called them (--libraries shows "
              "the library frames); gpuscope's own frames are left out; imports are one row.")]
    rate = rate_note(p.rates)
    if rate:
        notes.append(rate)
    return notes


def cpu_hotspots(report: Report, libraries: bool = False) -> Table:
    """Per Python function of the program: CPU and wall time with it innermost (self) and on the
    stack (total), library time folded into the calling line unless ``libraries``."""
    cols = [*HOTSPOT_COLUMNS, Column("Function"), Column("File")]
    title = "Python CPU Hotspots by Function"
    if not report.count("cpu_sample"):
        return Table("cpu_hotspots", title, cols, [], _no_samples(report))
    p = cpu_profile(report, libraries)
    rows = _rows(p.by_function, p, lambda k: short_path(k[1]))
    return Table("cpu_hotspots", title, cols, rows, _notes(p, libraries))


def cpu_hotspots_lines(report: Report, libraries: bool = False) -> Table:
    """Per source line of the program: CPU and wall time with it innermost (self) and on the stack
    (total), library time folded into the calling line unless ``libraries``."""
    cols = [*HOTSPOT_COLUMNS, Column("Function"), Column("Line")]
    title = "Python CPU Hotspots by Line"
    if not report.count("cpu_sample"):
        return Table("cpu_hotspots_lines", title, cols, [], _no_samples(report))
    p = cpu_profile(report, libraries)
    rows = _rows(p.by_line, p, lambda k: f"{short_path(k[1])}:{k[2]}" if k[2] else short_path(k[1]))
    return Table("cpu_hotspots_lines", title, cols, rows, _notes(p, libraries))


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
    span_s: float = 0.0  # from the first to the last reading

    @property
    def cores_used_percent(self) -> float:
        return self.process_cpu_percent / self.cores if self.cores else 0.0

    def advice(self) -> str:
        """One sentence about how the program used the machine's cores."""
        used = self.cores_used_percent
        text = (f"CPU utilization {used:.0f}% of {self.cores} cores "
                f"({self.process_cpu_percent / 100:.1f} cores busy on average)")
        if used >= UNDER_USED or self.span_s < MIN_ADVICE_S:
            return text + "."
        if self.machine_cpu_percent >= BUSY_MACHINE:
            return (text + f"; the machine's cores were {self.machine_cpu_percent:.0f}% busy (other programs "
                    "included): the program got what was left of them.")
        return text + ": the program may be under-using the cores (data loading, threads)."


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
           UNION ALL SELECT 'cores', count(DISTINCT name) FROM host_counter WHERE name LIKE 'cpu%.util_percent'
           UNION ALL SELECT 'span', (max(ts_ns) - min(ts_ns)) / 1e9 FROM host_counter"""
    ))
    if not rows.get("cores"):
        return None
    return HostSummary(int(rows["cores"]), float(rows["cpu"] or 0), float(rows["machine"] or 0),
                       float(rows["rss"] or 0), float(rows["threads"] or 0), float(rows.get("span") or 0))


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
