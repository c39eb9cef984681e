"""``step_sum``: the table of every step, with the overhead probe's steps marked (kept apart from
:mod:`.source`, which finds the steps, so that the probe, which reads steps, is not imported by it)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from ...trace.report import Report
from .probe import PACE, probe_timings
from .counts import probe_note, probe_rows, step_counts
from ..ops.attribution import ops_table
from .source import WARMUP_FACTOR, op_steps_table, step_source, step_windows
from ..table import Column, Table


def step_sum(report: Report) -> Table:
    """Per step: start (since its process started), duration, GPU busy time and share, kernels, warm-up.

    Step windows are those of :func:`step_windows` (a step lasts until the GPU has finished what
    was launched before its end). GPU busy time is the length of the union of the intervals of the
    GPU operations launched in the step. The leading steps that each took longer than 1.5x the median step (of all steps of
    the process) are flagged as warm-up (torch.compile's first steps, cuDNN autotuning, lazy
    initialisation). After each process's steps come rows (Step ``mean``, ``median``, ``p95``,
    ``stddev``) with the mean, median, 95th percentile (interpolated) and sample standard deviation
    of the duration, busy time and busy share of its steps that are not warm-up.
    """
    cols = [
        Column("PID", "id"), Column("Step"), Column("Start", "ns"), Column("Duration", "ns"),
        Column("GPU Busy", "ns"), Column("Busy", "percent"), Column("Kernels", "count"), Column("Warm-up"),
    ]  # fmt: skip
    source = step_source(report)
    if source.kind is None:
        note = ("No steps: mark them with gpuscope.step(), record PyTorch's optimizer steps with "
                "--trace torch, or wrap each step in a range named 'step'.")
        return Table("step_sum", "Step Summary", cols, [], [note])
    windows = step_windows(report, source)
    op_steps = op_steps_table(report, source)
    ops = ops_table(report)
    report.con.register("gpuscope_step_windows", windows)
    rows = report.sql(
        f"""
        WITH o AS (
            SELECT x.pid, x.step, o.start_ns, o.end_ns, o.kind
            FROM {op_steps} x JOIN {ops} o USING (op_id)),
        ordered AS (
            SELECT *, max(end_ns) OVER (PARTITION BY pid, step ORDER BY start_ns, end_ns
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
            FROM o),
        islands AS (
            SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                      OVER (PARTITION BY pid, step ORDER BY start_ns, end_ns) AS island
            FROM ordered),
        busy AS (
            SELECT pid, step, sum(e - s) AS busy, sum(k) AS kernels FROM (
                SELECT pid, step, island, min(start_ns) AS s, max(end_ns) AS e,
                       count(*) FILTER (WHERE kind = 'kernel') AS k
                FROM islands GROUP BY pid, step, island)
            GROUP BY pid, step),
        origin AS (
            SELECT s.pid, coalesce(min(p.start_ns), min(s.start_ns)) AS t
            FROM gpuscope_step_windows s LEFT JOIN process p ON p.pid = s.pid AND p.start_ns <= s.start_ns
            GROUP BY s.pid)
        SELECT s.pid, s.step, s.start_ns - origin.t, s.end_ns - s.start_ns,
               coalesce(b.busy, 0), coalesce(b.kernels, 0), s.warmup
        FROM gpuscope_step_windows s JOIN origin USING (pid) LEFT JOIN busy b USING (pid, step)
        ORDER BY s.pid, s.step"""
    )
    report.con.unregister("gpuscope_step_windows")
    out: list[tuple[object, ...]] = []
    notes = [f"Steps: {source.description}."]
    capture = report.meta.get("capture_range")
    if isinstance(capture, dict) and capture.get("description"):
        notes.append(f"Capture range: {capture['description']}; only the steps inside it are listed.")

    counts = {c.pid: c for c in step_counts(report, source, windows)}
    for t in probe_timings(report).values():
        c = counts.get(t.pid)
        if c is not None and c.probe is not None:
            notes.append(probe_note(c) or "")
        elif t.source == PACE:  # no steps marked: the probe switched collection off for stretches of time
            notes.append(f"Process {t.pid}: the overhead probe switched collection off for short stretches, not "
                         f"recorded (--no-overhead-probe records all): {t.describe()}.")
        else:  # steps counted otherwise than the probe's: no numbers to list them by
            notes.append(f"Process {t.pid}: the overhead probe ran some iterations with collection off, not "
                         f"recorded (--no-overhead-probe records every step): {t.describe()}.")
    gpu = bool(report.count(ops))  # without GPU activity the GPU columns are left empty, not 0
    for pid in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == pid]
        warm = sum(1 for r in mine if r[6])
        table: list[tuple[object, ...]] = [
            (pid, str(step), start, dur, *((busy, 100.0 * busy / dur if dur else None, kernels) if gpu
                                          else (None, None, None)), "yes" if warmup else "")
            for (_, step, start, dur, busy, kernels, warmup) in mine
        ]
        # the overhead probe's steps among the recorded ones, in step order, marked (no GPU columns:
        # nothing was recorded); left out of the summary rows
        origin = int(windows.loc[windows["pid"] == pid, "start_ns"].min()) - int(mine[0][2]) if mine else 0
        extra = probe_rows(counts[pid], origin) if pid in counts else []
        shown = sorted(table + extra, key=lambda r: int(str(r[1]).split()[0]))
        out += shown + _summary_rows(pid, table[warm:])
        if source.kind == "pattern" and mine and mine[0][2] > 0:
            notes.append(f"Process {pid}: set-up before step {mine[0][1]} (process start, imports, library "
                         f"set-up, compilation) took {mine[0][2] / 1e9:.3f} s; it is not a step.")
        if warm:
            first, last = mine[0][1], mine[warm - 1][1]
            which = f"step {first} is" if warm == 1 else f"steps {first}-{last} are"
            notes.append(f"Process {pid}: {which} warm-up (each longer than {WARMUP_FACTOR}x the median "
                         "step); the summary rows leave warm-up out.")
    return Table("step_sum", "Step Summary", cols, out, notes)


def _percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile with linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _summary_rows(pid: int, rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """Rows of the mean, median, p95 and sample standard deviation of duration, busy time and share."""
    if not rows:
        return []
    columns = [[float(r[i]) for r in rows if r[i] is not None] for i in (3, 4, 5)]  # type: ignore[arg-type]
    stats: dict[str, Callable[[list[float]], float]] = {
        "mean": statistics.fmean,
        "median": statistics.median,
        "p95": lambda v: _percentile(v, 0.95),
        "stddev": lambda v: statistics.stdev(v) if len(v) > 1 else 0.0,
    }
    return [(pid, label, None, *(fn(v) if v else None for v in columns), None, "") for label, fn in stats.items()]
