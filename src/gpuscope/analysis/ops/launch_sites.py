"""Where GPU work was launched from, by Python source line, from sampled stacks.

Stacks are not taken at each launch (that would cost microseconds per kernel); instead each GPU
operation gets the first Python stack sample (``--trace cpu``) of its launching thread taken at or
after its launch point, when that sample came within ``WINDOW_NS``. The thread is the launching
API call's (``--trace cuda-api``) or, without API records, the process's main thread. A line's
share is thus an estimate, like any sampling profile: the more launches, the closer.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from ...trace.report import Report
from ...trace.stacks import stack_sites
from .attribution import ops_table
from ..table import Column, Table

WINDOW_NS = 2_000_000  # a sample later than this after the launch says nothing about it


def after_launches(launches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Windows of ``WINDOW_NS`` after each launch time: sorted starts and their ends (they may
    overlap; :func:`sampled_lines` counts a sample once)."""
    starts = np.unique(np.asarray(launches, dtype=np.int64))
    return starts, starts + WINDOW_NS


def sampled_lines(report: Report, pid: int, samples: pd.DataFrame, starts: np.ndarray,
                  ends: np.ndarray) -> list[tuple[str, str, float]]:
    """The program lines (``file:line``, function, summed ``weight``) of the ``samples`` (``ts_ns``,
    ``stack_id``, ``weight``) of process ``pid`` taken inside the windows [starts, ends), most first.
    The windows are sorted by start, and each ends no earlier than the one before (disjoint, or all
    of one length)."""
    if not len(samples) or not len(starts):
        return []
    ts = samples["ts_ns"].to_numpy(np.int64)
    w = np.searchsorted(starts, ts, "right") - 1
    inside = (w >= 0) & (ts < ends[np.maximum(w, 0)])
    weight = samples[inside].groupby("stack_id")["weight"].sum()
    if not len(weight):
        return []
    sites = stack_sites(report, {(pid, int(s)) for s in weight.index})
    by_line: dict[tuple[str, str], float] = defaultdict(float)
    for sid, value in weight.items():
        site = sites[(pid, int(sid))]
        by_line[(site.location, site.function)] += float(value)
    return [(loc, func, value) for (loc, func), value in sorted(by_line.items(), key=lambda kv: -kv[1])]


def launch_sum(report: Report) -> Table:
    """Per program line: GPU operations launched there (sampled) and their GPU time."""
    cols = [Column("GPU Time", "percent"), Column("Total GPU Time", "ns"), Column("Operations", "count"),
            Column("Function"), Column("Location")]
    name, title = "launch_sum", "GPU Work by Launching Source Line (sampled)"
    if not report.count("cpu_sample"):
        hint = report.not_recorded().get("cpu")
        why = f"No Python stack samples in this report: {hint}." if hint else "No Python stack samples were recorded."
        return Table(name, title, cols, [], [why])
    rows = report.sql(
        f"""
        WITH o AS (SELECT op_id, pid, coalesce(tid, pid) AS tid, launch_ns, end_ns - start_ns AS d
                   FROM {ops_table(report)}),
             s AS (SELECT pid, tid, ts_ns, stack_id FROM cpu_sample)
        SELECT o.pid, s.stack_id, count(*), sum(o.d)
        FROM o ASOF JOIN s ON s.pid = o.pid AND s.tid = o.tid AND s.ts_ns >= o.launch_ns
        WHERE s.ts_ns - o.launch_ns <= {WINDOW_NS}
        GROUP BY ALL"""
    )
    total_ops, total_ns = report.sql(f"SELECT count(*), coalesce(sum(end_ns - start_ns), 0) FROM {ops_table(report)}")[0]
    sites = stack_sites(report, {(pid, sid) for pid, sid, _, _ in rows})
    by_line: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for pid, sid, n, d in rows:
        site = sites[(pid, sid)]
        by_line[(site.location, site.function)][0] += int(n)
        by_line[(site.location, site.function)][1] += int(d)
    out = [(100.0 * d / total_ns if total_ns else 0.0, d, n, func, loc) for (loc, func), (n, d) in by_line.items()]
    out.sort(key=lambda r: (-r[1], r[4]))
    placed = sum(r[2] for r in out)
    notes = [f"{placed:,} of {total_ops:,} GPU operations placed by the first stack sample of their launching "
             f"thread within {WINDOW_NS // 1_000_000} ms after the launch; % of all GPU time."]
    return Table(name, title, cols, out, notes)


REPORTS = {"launch_sum": launch_sum}
