"""The overhead probe read back: the program's steps timed with collection off, beside the recorded ones.

In a run recorded whole, the profiled process switches collection off for a few steps now and then
(capture/process/window.py) and keeps their step marks. The capture windows around such a probe
name it in their reasons. Per process, from the marks:

- *off* steps: the steps inside a probe but its first (the first one paid for switching the
  collectors off), timed mark to mark;
- *on* steps: the recorded steps whose two marks lie in one capture window, after the warm-up
  steps, timed the same way (mark to mark, so that both groups are measured alike).

Their medians give how much longer collection made a step, a measurement of the profiler's cost that
needs no model of it. What stays on during a probe (the step marks, the wrappers that pass calls
straight through, CUPTI's subscription) is not in the difference, so it is a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace.report import Report
from ..trace.trim import PROBE_CLOSES

MIN_OFF_STEPS = 2  # fewer timed steps without collection than this: no verdict
WARMUP_MARKS = 3  # recorded steps before the 4th mark are left out of the ``on`` steps (warm-up)
NOISE = 0.03  # a difference of the medians below this share of the off median is not a cost


@dataclass(frozen=True)
class ProbeTiming:
    """One process's steps with collection off and on (mark-to-mark durations, ns)."""

    pid: int
    probes: int
    off_ns: tuple[int, ...]
    on_ns: tuple[int, ...]
    source: str = "torch"  # what the steps were timed by: gpuscope, torch (optimizer) or module (outermost calls)

    @property
    def off_median(self) -> float:
        """The median step with collection off (0.0 when none was timed)."""
        return float(np.median(self.off_ns)) if self.off_ns else 0.0

    @property
    def on_median(self) -> float:
        """The median recorded step (0.0 when none was timed)."""
        return float(np.median(self.on_ns)) if self.on_ns else 0.0

    @property
    def ratio(self) -> float:
        """How many times longer a recorded step took than one without collection (1.0: no cost seen)."""
        return self.on_median / self.off_median if self.off_median > 0 and self.on_median > 0 else 1.0

    @property
    def measured(self) -> bool:
        """Whether there are enough steps of both kinds for a verdict."""
        return len(self.off_ns) >= MIN_OFF_STEPS and len(self.on_ns) >= MIN_OFF_STEPS

    @property
    def cost_share(self) -> float:
        """The share of a recorded step that collection added (0 when within the noise or unmeasured)."""
        if not self.measured or self.ratio < 1 + NOISE:
            return 0.0
        return 1.0 - 1.0 / self.ratio

    def describe(self) -> str:
        """One line: what the probe measured, or why it measured nothing (a probe at the run's last
        steps times no step with collection off)."""
        from ..units import duration

        unit = "iteration" if self.source == "module" else "step"
        def n(count: int, what: str = unit) -> str:
            return f"{count} {what}{'s' if count != 1 else ''}"

        if not self.measured:
            return (f"{n(self.probes, 'probe')} timed {n(len(self.off_ns))} with collection off and "
                    f"{len(self.on_ns)} recorded {unit}{'s' if len(self.on_ns) != 1 else ''} (at least "
                    f"{MIN_OFF_STEPS} of each are needed): no measurement")
        low, high = min(self.off_ns), max(self.off_ns)
        what = " (outermost module calls: nothing marks steps)" if self.source == "module" else ""
        return (f"{n(len(self.off_ns))}{what} with collection off ({n(self.probes, 'probe')}) took "
                f"{duration(self.off_median)} each (median; {duration(low)} to {duration(high)}) against "
                f"{duration(self.on_median)} for the {len(self.on_ns)} recorded ones: collection made "
                f"{'an' if unit == 'iteration' else 'a'} {unit} {self.ratio - 1:+.0%} longer")


def probe_timings(report: Report) -> dict[int, ProbeTiming]:
    """Return, per process that ran an overhead probe, its steps with collection off and on."""
    if not report.count("capture_window"):
        return {}
    windows = report.sql("SELECT pid, start_ns, coalesce(end_ns, 9223372036854775807), reason FROM capture_window "
                         "WHERE end_ns IS NULL OR end_ns > start_ns ORDER BY pid, start_ns")
    # the marks steps are counted by, as the capture window counted them: gpuscope.step() marks
    # where the program made any, else PyTorch's optimizer steps, else (an inference loop) the ends of
    # the outermost module calls
    marks = report.sql(
        """SELECT DISTINCT r.pid, r.source, r.start_ns FROM nvtx_range r JOIN string n ON n.id = r.name_id
           WHERE r.kind = 'mark' AND ((r.category = 'step' AND n.value = 'step' AND r.source IN ('gpuscope', 'torch'))
                 OR (r.category = 'iteration' AND n.value = 'iteration' AND r.source = 'module'))
           ORDER BY r.pid, r.start_ns""")
    by_pid: dict[int, dict[str, list[int]]] = {}
    for pid, source, t in marks:
        by_pid.setdefault(int(pid), {}).setdefault(source, []).append(int(t))
    spans: dict[int, list[tuple[int, int, str]]] = {}
    for pid, start, end, reason in windows:
        spans.setdefault(int(pid), []).append((int(start), int(end), reason or ""))
    out = {}
    for pid, mine in spans.items():
        sources = by_pid.get(pid, {})
        source = next((s for s in ("gpuscope", "torch", "module") if sources.get(s)), "module")
        t = np.array(sources.get(source, []), np.int64)
        probes = sum(1 for _, _, reason in mine if PROBE_CLOSES in reason.rpartition(" to ")[2])
        if not probes or len(t) < 3:
            continue
        off, on = _split(t, mine)
        out[pid] = ProbeTiming(pid, probes, tuple(off), tuple(on), source)
    return out


def _split(marks: np.ndarray, windows: list[tuple[int, int, str]]) -> tuple[list[int], list[int]]:
    """The mark-to-mark durations of the timed steps inside probes, and of the recorded steps."""
    off: list[int] = []
    on: list[int] = []
    durations = np.diff(marks)
    for (_, end, reason), (start, _, _) in zip(windows, windows[1:]):
        if PROBE_CLOSES not in reason.rpartition(" to ")[2]:
            continue
        # marks in the gap: the probe's first mark closes the window (at ``end``); the step after it
        # paid for the switch; the steps after that, up to the mark that switched collection back on
        # (just before ``start``), are timed
        inside = np.flatnonzero((marks >= end) & (marks <= start))
        off += [int(durations[i]) for i in inside[1:-1]]
    first_steady = min(WARMUP_MARKS, len(marks) - 1)  # the first steps of the run are not steady
    for begin, end, _ in windows:
        inside = np.flatnonzero((marks >= begin) & (marks <= end))
        on += [int(durations[i]) for i in inside[:-1] if i >= first_steady]
    return off, on
