"""How many steps a run had, in the words every output uses for them.

- **found**: the steps the step marks delimit, whether recorded or not (without marks: the steps
  found as ranges or a repeating pattern, all of them recorded);
- **recorded**: the steps that ran with collection on and lie whole in a capture window: the rows of
  ``step_sum`` with a number, and what the diagnosis averages;
- **warm-up**: the leading recorded steps each longer than 1.5x the median (``step_sum``'s flag),
  left out of the averages;
- **in the overhead probe**: steps that ran while the probe had collection off (analysis/steps/probe.py):
  the step that switched it off, those **timed with collection off**, and the step that switched
  it back on;
- the rest, in a report limited by a capture range, ran outside it.

The end-of-run summary, ``step_sum``, ``analyze`` and the viewer take their numbers from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...trace.report import Report
from .probe import ProbeTiming, probe_timings, step_ranges
from .source import _MARKS, StepSource, step_source, step_windows


@dataclass(frozen=True)
class ProcessSteps:
    """The steps of one process by what happened to them (step numbers as ``step_sum`` numbers them)."""

    pid: int
    found: int
    recorded: tuple[int, ...]
    warmup: tuple[int, ...]
    probe: ProbeTiming | None = None  # the overhead probe, where its steps are numbered as these

    @property
    def in_probe(self) -> tuple[int, ...]:
        """The steps the overhead probe kept from being recorded."""
        return self.probe.probe_steps if self.probe is not None else ()

    @property
    def timed_off(self) -> tuple[int, ...]:
        """The steps timed with collection off."""
        return self.probe.off_steps if self.probe is not None else ()

    @property
    def steady(self) -> int:
        """Recorded steps that are not warm-up."""
        return len(self.recorded) - len(self.warmup)


def step_counts(report: Report, source: StepSource | None = None,
                windows: pd.DataFrame | None = None) -> list[ProcessSteps]:
    """Return, per process with steps, its steps found, recorded, warm-up and in the overhead probe."""
    source = source or step_source(report)
    if source.kind is None:
        return []
    windows = step_windows(report, source) if windows is None else windows
    marks: dict[int, int] = {}
    if source.kind in ("gpuscope", "torch"):
        marks = {int(p): int(n) for p, n in report.sql(
            f"SELECT pid, count(*) FROM ({_MARKS.format(source=source.kind)}) GROUP BY pid")}
    probes = {pid: t for pid, t in probe_timings(report).items() if t.source == source.kind}
    out = []
    for pid in sorted({int(p) for p in windows["pid"]} | set(probes)):
        own = windows[windows["pid"] == pid]
        recorded = tuple(int(s) for s in own["step"])
        warm = tuple(int(s) for s in own.loc[own["warmup"], "step"])
        found = max(marks.get(pid, 0), len(recorded))
        out.append(ProcessSteps(pid, found, recorded, warm, probes.get(pid)))
    return out


def describe_counts(counts: list[ProcessSteps], source: str, capture_range: bool = False) -> str:
    """``60 steps found from PyTorch's marks ...: 52 recorded (1 warm-up); 8 in the overhead probe
    (steps 11-14, 36-39), 4 of them timed with collection off``; step numbers with one process only."""
    if not counts:
        return "no steps found"
    found = sum(c.found for c in counts)
    recorded = sum(len(c.recorded) for c in counts)
    warm = sum(len(c.warmup) for c in counts)
    probe = sum(len(c.in_probe) for c in counts)
    timed = sum(len(c.timed_off) for c in counts)
    rest = found - recorded - probe
    parts = [f"{recorded:,} recorded" + (f" ({warm:,} warm-up)" if warm else "")]
    if probe:
        which = f" (steps {step_ranges(counts[0].in_probe)})" if len(counts) == 1 else ""
        parts.append(f"{probe:,} in the overhead probe{which}, {timed:,} of them timed with collection off")
    if rest > 0:
        parts.append(f"{rest:,} outside the capture range" if capture_range else f"{rest:,} not recorded")
    plural = "s" if found != 1 else ""
    return f"{found:,} step{plural} found from {source}: " + "; ".join(parts)


def probe_spans(counts: ProcessSteps) -> list[tuple[int, int, int, str]]:
    """The overhead probe's steps of one process, mark to mark: ``(step, start_ns, end_ns, what)``,
    ``what`` being ``collection off`` (timed), ``switching off`` (a probe's first) or ``switching
    on`` (its last, or a step of a probe the run ended in)."""
    if counts.probe is None:
        return []
    timed, probe = set(counts.probe.off_steps), set(counts.probe.probe_steps)

    def what(step: int) -> str:
        if step in timed:
            return "collection off"
        return "switching off" if step - 1 not in probe else "switching on"

    return [(step, start, end, what(step)) for step, start, end in counts.probe.probe_spans]


def probe_rows(counts: ProcessSteps, origin_ns: int) -> list[tuple[object, ...]]:
    """``step_sum`` rows of the overhead probe's steps of one process: pid, step (marked), start since
    ``origin_ns``, duration mark to mark, no GPU columns, no warm-up."""
    return [(counts.pid, f"{step} ({what})", start - origin_ns, end - start, None, None, None, "")
            for step, start, end, what in probe_spans(counts)]


def probe_note(counts: ProcessSteps) -> str | None:
    """The note under ``step_sum`` on the overhead probe's steps of one process."""
    t = counts.probe
    if t is None:
        return None
    switching = step_ranges(t.switch_steps)
    return (f"Process {counts.pid}: steps {step_ranges(t.probe_steps)} ran in the overhead probe, not "
            f"recorded (--no-overhead-probe records every step): "
            + (f"collection was switched off or back on during steps {switching}; " if switching else "")
            + f"{t.describe()}.")
