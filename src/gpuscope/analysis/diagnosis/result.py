"""The result of a diagnosis: each process's step breakdown, the ranked findings, the rules skipped,
and the tables they make."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..table import Column, Table
from .breakdown import LABELS, PARTS, ProcessBreakdown
from .context import MIN_SHARE
from .finding import Finding, Skipped

if TYPE_CHECKING:
    from ...trace.report import Report

SHORT = {"idle_cpu": "CPU", "idle_launch": "Launch", "idle_sync": "Sync", "idle_data": "Data",
         "idle_transfer": "Transfer", "idle_warmup": "Warm-up"}


@dataclass
class Diagnosis:
    """The breakdown of every process that ran GPU work, the ranked findings, and the rules skipped."""

    step_source: str
    processes: list[ProcessBreakdown]
    findings: list[Finding]
    skipped: list[Skipped]
    notes: list[str] = field(default_factory=list)
    min_share: float = MIN_SHARE  # findings saving less than this share of the step were left out
    step_counts: dict[int, str] = field(default_factory=dict)  # per process: its steps found, recorded, ... in words
    # the host side of the same processes where PyTorch's ranges were recorded (CpuBreakdown each: the
    # main thread's step time in data loading, forward, backward, optimizer, other Python), and its steps
    host: list[Any] = field(default_factory=list)
    host_source: str = ""

    # the parts of a step and the breakdown table's name, title and note without processes
    PART_NAMES: ClassVar[tuple[str, ...]] = PARTS
    PART_LABELS: ClassVar[dict[str, str]] = LABELS
    BREAKDOWN: ClassVar[tuple[str, str]] = ("step_breakdown", "Step-Time Breakdown")
    NOTHING: ClassVar[str] = "No GPU operations in this report: there is no step time to break down."

    def scope_note(self, p: ProcessBreakdown) -> str:
        """What one process's means cover, in one line."""
        return _scope(p, self.step_source, self.step_counts.get(p.pid))

    def breakdown_table(self) -> Table:
        """Per process, the mean time per steady step of each part (parts that are zero left out)."""
        notes = [*self.notes, *(self.scope_note(p) for p in self.processes)]
        if not self.processes:
            notes.append(self.NOTHING)
        return parts_table(*self.BREAKDOWN, self.processes, self.PART_NAMES, self.PART_LABELS, notes)

    def host_table(self) -> Table | None:
        """Per process, the host side's breakdown (:attr:`host`), or None where it was not recorded."""
        if not self.host:
            return None
        from .cpu_breakdown import CPU_LABELS, CPU_PARTS, scope_text

        notes = [scope_text(b, self.host_source) for b in self.host]
        return parts_table(*HOST, self.host, CPU_PARTS, CPU_LABELS, [*notes, HOST_NOTE])

    def steps_table(self) -> Table:
        """Per step: duration, the busy share, and the share of each idle cause."""
        idle = [p for p in PARTS if p.startswith("idle_")]
        cols = [Column("PID", "id"), Column("Step"), Column("Duration", "ns"), Column("Busy", "percent")]
        cols += [Column(SHORT[p], "percent") for p in idle]
        cols.append(Column("Warm-up Step"))
        rows: list[tuple[object, ...]] = []
        for p in self.processes:
            for r in p.steps.itertuples(index=False):
                d = float(r.duration_ns) or 1.0
                busy = sum(float(getattr(r, k)) for k in PARTS if k.startswith("busy_"))
                rows.append((p.pid, r.step, r.duration_ns, 100.0 * busy / d,
                             *(100.0 * float(getattr(r, k)) / d for k in idle), "yes" if r.warmup else ""))
        notes = ["Busy: share of the step with GPU work running; the other columns: GPU idle by cause "
                 "(CPU work, launch overhead, host synchronization, data loading, host-device transfers, "
                 "warm-up); each row adds up to 100%."]
        return Table("step_parts", "Step Time by Part", cols, rows, notes if rows else [])


HOST = ("host_step_breakdown", "Host Step-Time Breakdown (PyTorch's ranges)")
HOST_NOTE = ("The host's parts: waiting for the DataLoader, module forward, loss.backward(), optimizer step and "
             "zero_grad, and the rest of the loop's Python, on the thread that runs the loop. Launching kernels and "
             "waiting for the GPU fall in the part whose code did it; the host's steps are found on its own (they "
             "may differ from the GPU side's by a few).")


def parts_table(name: str, title: str, processes: list[Any], parts: tuple[str, ...], labels: dict[str, str],
                notes: list[str]) -> Table:
    """Per process (a breakdown with ``mean_parts()``), the mean time per steady step of each of
    ``parts`` (those that are zero left out) and the step's total."""
    cols = [Column("PID", "id"), Column("Part"), Column("Per Step", "ns"), Column("Share", "percent")]
    rows: list[tuple[object, ...]] = []
    for p in processes:
        mean = p.mean_parts()
        step = mean["duration_ns"]
        for part in parts:
            if round(mean[part]):
                rows.append((p.pid, labels[part], mean[part], 100.0 * mean[part] / step if step else 0.0))
        rows.append((p.pid, "Step (total)", step, 100.0))
    return Table(name, title, cols, rows, notes)


def _scope(p: ProcessBreakdown, source: str, counts: str | None = None) -> str:
    if not p.has_steps:
        return (f"Process {p.pid}: no steps, so the whole capture (first launch to last GPU operation) "
                "counts as one step.")
    warm = int(p.steps["warmup"].sum())
    steady = len(p.steady)
    text = f"Process {p.pid}: mean of {steady} steady step{'s' if steady != 1 else ''}; "
    if counts:  # the words of analysis/steps/counts.py: found, recorded, warm-up, in the overhead probe
        return text + counts + "."
    text += f"steps: {source}"
    if warm and warm < len(p.steps):
        text += f"; warm-up step{'s' if warm > 1 else ''} 1{'-' + str(warm) if warm > 1 else ''} left out"
    return text + "."


def counts_by_process(report: Report) -> dict[int, str]:
    """Per process, its steps in the words every output uses (analysis/steps/counts.py)."""
    from ...trace.trim import capture_limited
    from ..steps.counts import describe_counts, step_counts
    from ..steps.source import step_source

    source = step_source(report)
    limited = capture_limited(report.meta)
    return {c.pid: describe_counts([c], source.description, limited) for c in step_counts(report, source)}
