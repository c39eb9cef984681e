"""Training steps: where they are, how long they take, and how busy they keep the GPU.

Steps come from the first of these that the report has:

1. ``gpuscope.step()`` marks (source ``gpuscope``, category and name ``step``);
2. PyTorch's marks at the end of each ``optimizer.step()`` (source ``torch``, same category and name);
3. ranges named exactly ``step`` (of any source, e.g. ``torch.cuda.nvtx.range("step")``).

With marks, step *k* runs from mark *k-1* to mark *k* in its process, and step 1 from the process's
first range or first GPU-operation launch to the first mark; work after the last mark belongs to
no step. With ranges, each range that ended is a step. In a report limited by a capture range,
step marks are kept for the whole run, so steps keep their numbers, and only the steps that lie
inside a capture window are listed. A GPU operation belongs to the step in which
it was launched (on any thread of the process; see :mod:`.attribution` for launch points).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from ..trace.report import Report
from ..trace.trim import capture_limited
from .attribution import ops_table, temp_table
from .capture import windows_table
from .table import Column, Table

STEPS = "gpuscope_step"
OP_STEPS = "gpuscope_op_step"
WARMUP_FACTOR = 1.5

_MARKS = """
    SELECT DISTINCT r.pid, r.start_ns AS t
    FROM nvtx_range r JOIN string n ON n.id = r.name_id
    WHERE r.kind = 'mark' AND r.category = 'step' AND n.value = 'step' AND r.source = '{source}'"""

SOURCES = {
    "gpuscope": "gpuscope.step() marks",
    "torch": "PyTorch's marks at the end of optimizer.step()",
    "range": "ranges named 'step' (no step marks were recorded)",
}


@dataclass(frozen=True)
class StepSource:
    """Which records the steps of a report were taken from (a key of :data:`SOURCES`; None: none)."""

    kind: str | None

    @property
    def description(self) -> str:
        """Return the source in words, for notes."""
        return SOURCES[self.kind] if self.kind else "no steps"


def step_source(report: Report) -> StepSource:
    """Return which records define the report's steps (see the module docstring)."""
    if not report.count("nvtx_range"):
        return StepSource(None)
    for source in ("gpuscope", "torch"):
        if report.sql(f"SELECT count(*) FROM ({_MARKS.format(source=source)})")[0][0]:
            return StepSource(source)
    ranges = report.sql(
        "SELECT count(*) FROM nvtx_range r JOIN string n ON n.id = r.name_id "
        "WHERE r.kind = 'range' AND n.value = 'step' AND r.end_ns IS NOT NULL"
    )[0][0]
    return StepSource("range" if ranges else None)


def steps_table(report: Report, source: StepSource) -> str:
    """Create the table of steps ``(pid, step, start_ns, end_ns, stop_ns)``; return its name.

    ``stop_ns`` is the first time after the step: its end for a range, the next mark for marks.
    """
    if source.kind == "range":
        query = """
            SELECT r.pid, row_number() OVER (PARTITION BY r.pid ORDER BY r.start_ns, r.end_ns) AS step,
                   r.start_ns, r.end_ns, r.end_ns + 1 AS stop_ns
            FROM nvtx_range r JOIN string n ON n.id = r.name_id
            WHERE r.kind = 'range' AND n.value = 'step' AND r.end_ns IS NOT NULL"""
    else:
        query = f"""
            WITH marks AS ({_MARKS.format(source=source.kind)}),
            first AS (
                SELECT pid, min(t) AS t FROM (
                    SELECT pid, start_ns AS t FROM nvtx_range WHERE kind = 'range'
                    UNION ALL SELECT pid, launch_ns FROM {ops_table(report)})
                GROUP BY pid),
            bounds AS (
                SELECT m.pid, row_number() OVER (PARTITION BY m.pid ORDER BY m.t) AS step,
                       coalesce(lag(m.t) OVER (PARTITION BY m.pid ORDER BY m.t), f.t) AS start_ns,
                       m.t AS end_ns
                FROM marks m LEFT JOIN first f USING (pid))
            SELECT pid, step, start_ns, end_ns, end_ns AS stop_ns
            FROM bounds WHERE start_ns < end_ns"""
    if report.count("capture_window") or capture_limited(report.meta):
        query = f"""
            SELECT s.* FROM ({query}) s WHERE EXISTS (
                SELECT 1 FROM {windows_table(report)} w
                WHERE w.pid = s.pid AND s.start_ns >= w.start_ns AND s.end_ns <= w.end_ns)"""
    return temp_table(report, f"{STEPS}_{source.kind}", query)


def op_steps_table(report: Report, source: StepSource) -> str:
    """Create the table ``(op_id, pid, step)`` of the operations launched within steps; return its name."""
    steps = steps_table(report, source)
    query = f"""
        SELECT o.op_id, s.pid, s.step
        FROM {ops_table(report)} o ASOF JOIN {steps} s ON s.pid = o.pid AND o.launch_ns >= s.start_ns
        WHERE o.launch_ns < s.stop_ns"""
    return temp_table(report, f"{OP_STEPS}_{source.kind}", query)


def _warmup(durations: list[int]) -> int:
    """The number of leading steps each longer than WARMUP_FACTOR times the median of all."""
    ordered = sorted(durations)
    n = len(ordered)
    median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    count = 0
    while count < n and durations[count] > WARMUP_FACTOR * median:
        count += 1
    return count


def step_sum(report: Report) -> Table:
    """Per step: start (since its process started), duration, GPU busy time and share, kernels, warm-up.

    GPU busy time is the length of the union of the intervals of the GPU operations launched in the
    step; they may run after the step ended, so the share can exceed 100% when the GPU lags behind
    the host. The leading steps that each took longer than 1.5x the median step (of all steps of
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
    steps = steps_table(report, source)
    op_steps = op_steps_table(report, source)
    ops = ops_table(report)
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
            FROM {steps} s LEFT JOIN process p ON p.pid = s.pid AND p.start_ns <= s.start_ns
            GROUP BY s.pid)
        SELECT s.pid, s.step, s.start_ns - origin.t, s.end_ns - s.start_ns,
               coalesce(b.busy, 0), coalesce(b.kernels, 0)
        FROM {steps} s JOIN origin USING (pid) LEFT JOIN busy b USING (pid, step)
        ORDER BY s.pid, s.step"""
    )
    out: list[tuple[object, ...]] = []
    notes = [f"Steps: {source.description}."]
    capture = report.meta.get("capture_range")
    if isinstance(capture, dict) and capture.get("description"):
        notes.append(f"Capture range: {capture['description']}; only the steps inside it are listed.")
    for pid in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == pid]
        warm = _warmup([r[3] for r in mine])
        table: list[tuple[object, ...]] = [
            (pid, str(step), start, dur, busy, 100.0 * busy / dur if dur else None, kernels,
             "yes" if i < warm else "")
            for i, (_, step, start, dur, busy, kernels) in enumerate(mine)
        ]
        out += table + _summary_rows(pid, table[warm:])
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
