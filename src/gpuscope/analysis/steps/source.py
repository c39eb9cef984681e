"""Training steps: where they are, how long they take, and how busy they keep the GPU.

Steps come from the first of these that the report has:

1. ``gpuscope.step()`` marks (source ``gpuscope``, category and name ``step``);
2. PyTorch's marks at the end of each ``optimizer.step()`` (source ``torch``, same category and name);
3. ranges named exactly ``step`` (of any source, e.g. ``torch.cuda.nvtx.range("step")``);
4. without any of those, the program's loop as the repeating sequence of the GPU operations it
   launched; without GPU operations, of its main thread's top-level module calls, else of its
   sampled Python stacks, else of the PyTorch operators it ran (where every one was recorded):
   :mod:`.pattern`, :mod:`.from_pattern`. Step *k* runs from the launch that starts iteration *k* to the one that
   starts iteration *k+1*; what came before the first iteration is set-up (process start, imports,
   library set-up, compilation), not a step.

With marks, step *k* runs from mark *k-1* to mark *k* in its process, and step 1 from the process's
first range or first GPU-operation launch to the first mark; work after the last mark belongs to
no step. With ranges, each range that ended is a step. In a report limited by a capture range,
step marks are kept for the whole run, so steps keep their numbers, and only the steps that lie
inside a capture window are listed. A GPU operation belongs to the step in which
it was launched (on any thread of the process; see :mod:`..ops.attribution` for launch points).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...trace.report import Report
from ...trace.trim import capture_limited
from ..ops.attribution import ops_table, temp_table
from .from_pattern import pattern_steps
from .windows import windows_table

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
    "pattern": "the program's repeating launch sequence (no step marks were recorded)",
}


@dataclass(frozen=True)
class StepSource:
    """Which records the steps of a report were taken from (a key of :data:`SOURCES`; None: none),
    and for steps found as a pattern, how (``detail``)."""

    kind: str | None
    detail: str = ""

    @property
    def description(self) -> str:
        """Return the source in words, for notes."""
        if self.kind in ("pattern", None) and self.detail:
            return self.detail
        return SOURCES[self.kind] if self.kind else "no steps"


def step_source(report: Report) -> StepSource:
    """Return which records define the report's steps (see the module docstring)."""
    if report.count("nvtx_range"):
        for source in ("gpuscope", "torch"):
            if report.sql(f"SELECT count(*) FROM ({_MARKS.format(source=source)})")[0][0]:
                return StepSource(source)
        ranges = report.sql(
            "SELECT count(*) FROM nvtx_range r JOIN string n ON n.id = r.name_id "
            "WHERE r.kind = 'range' AND n.value = 'step' AND r.end_ns IS NOT NULL"
        )[0][0]
        if ranges:
            return StepSource("range")
    found = pattern_steps(report)
    return StepSource("pattern", found.detail) if len(found.frame) else StepSource(None, found.detail)


def steps_table(report: Report, source: StepSource) -> str:
    """Create the table of steps ``(pid, step, start_ns, end_ns, stop_ns)``; return its name.

    ``stop_ns`` is the first time after the step: its end for a range, the next mark for marks.
    """
    if source.kind == "pattern":
        frame = pattern_steps(report).frame
        report.con.register("gpuscope_pattern_frame", frame)
        query = "SELECT pid, step, start_ns, end_ns, stop_ns FROM gpuscope_pattern_frame"
    elif source.kind == "range":
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


def step_windows(report: Report, source: StepSource | None = None) -> pd.DataFrame:
    """Return every step's window: ``pid``, ``step`` (its number), ``start_ns``, ``end_ns``, ``warmup``.

    A step ends when the host has reached its end (the next mark, the end of its range, the start of
    the next iteration) *and* the GPU has finished every operation launched before that, so that a
    GPU running behind the host still gets its own time per step. Marks and patterns give steps that
    follow each other (a step starts where the previous one ended); ranges keep their gaps. Steps
    that end up empty are left out. ``warmup`` flags the leading steps each longer than
    :data:`WARMUP_FACTOR` times the median. ``step_sum``, the roofline, layers and the diagnosis all
    take their steps from here.
    """
    source = source or step_source(report)
    cols = ["pid", "step", "start_ns", "end_ns", "warmup"]
    if source.kind is None:
        return pd.DataFrame({c: pd.Series(dtype=bool if c == "warmup" else "int64") for c in cols})
    steps = report.df(f"SELECT pid, step, start_ns, end_ns, stop_ns FROM {steps_table(report, source)} "
                      "ORDER BY pid, start_ns")
    ops = report.df(f"SELECT pid, launch_ns, end_ns FROM {ops_table(report)} ORDER BY pid, launch_ns")
    gpu_side: set[int] = set()
    if source.kind == "pattern":
        found = pattern_steps(report).frame
        gpu_side = {int(p) for p in found.loc[found["gpu_side"], "pid"].unique()}
    out = []
    for pid, mine in steps.groupby("pid", sort=True):
        own = ops[ops["pid"] == pid]
        launch = own["launch_ns"].to_numpy(np.int64)
        # latest end of the operations launched before each time: a running maximum in launch order
        end_by_launch = np.maximum.accumulate(own["end_ns"].to_numpy(np.int64)) if len(own) else np.array([])
        rows = []
        prev_end: int | None = None
        prev_step = -1
        for step, start, end, stop in zip(mine["step"], mine["start_ns"], mine["end_ns"], mine["stop_ns"]):
            n = int(np.searchsorted(launch, stop, "left"))
            finish = int(end) if int(pid) in gpu_side else max(int(end), int(end_by_launch[n - 1]) if n else int(end))
            # a step follows on from the one before it, not across steps left out (outside the capture
            # windows: what ran between was not recorded)
            follows = prev_end is not None and int(step) == prev_step + 1
            begin = int(start) if not follows else max(int(start), prev_end)  # type: ignore[arg-type]
            if source.kind != "range" and follows:
                begin = prev_end  # type: ignore[assignment]
            if finish <= begin:
                continue
            rows.append((int(pid), int(step), begin, finish))
            prev_end, prev_step = finish, int(step)
        frame = pd.DataFrame(rows, columns=cols[:4])
        warm = _warmup((frame["end_ns"] - frame["start_ns"]).tolist()) if len(frame) else 0
        frame["warmup"] = np.arange(len(frame)) < warm
        out.append(frame)
    return pd.concat(out, ignore_index=True) if out else step_windows(report, StepSource(None))


def _warmup(durations: list[int]) -> int:
    """The number of leading steps each longer than WARMUP_FACTOR times the median of all."""
    ordered = sorted(durations)
    n = len(ordered)
    median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    count = 0
    while count < n and durations[count] > WARMUP_FACTOR * median:
        count += 1
    return count
