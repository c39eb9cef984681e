"""The diagnosis of a report without GPU operations: the CPU side is all there is.

``diagnose_cpu(report)`` splits each steady step's wall time into data loading, forward, backward,
optimizer and other Python (:mod:`.cpu_breakdown`), runs the rules that read the CPU side
(:mod:`.rules`, through :mod:`.engine`) and ranks their findings by the time the fix saves per step.
The GPU rules are listed as not checked. The
result is a :class:`CpuDiagnosis`: a :class:`Diagnosis` whose tables show the CPU parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ...trace.report import Report
from ..table import Column, Table
from .result import Diagnosis
from .context import MIN_SHARE
from .cpu_breakdown import CPU_LABELS, CPU_PARTS, CPU_SHORT, CpuBreakdown, scope_text
from .cpu_context import CpuContext
from .engine import GPU_REASON, ranked, run_rules
from .rule import Rule

__all__ = ["CpuDiagnosis", "GPU_REASON", "diagnose_cpu"]

@dataclass
class CpuDiagnosis(Diagnosis):
    """A diagnosis of the CPU side: ``processes`` hold :class:`.cpu_breakdown.CpuBreakdown`."""

    parts: tuple[str, ...] = field(default=CPU_PARTS)
    startup: dict[int, dict[str, object]] = field(default_factory=dict)  # per process: its start-up, a note
    no_steps_why: str = ""  # without steps, why no pattern gave them (steps/from_pattern.py), for the notes

    PART_NAMES: ClassVar[tuple[str, ...]] = CPU_PARTS
    PART_LABELS: ClassVar[dict[str, str]] = CPU_LABELS
    BREAKDOWN: ClassVar[tuple[str, str]] = ("cpu_step_breakdown", "CPU Step-Time Breakdown (no GPU operations)")
    NOTHING: ClassVar[str] = "No Python samples or PyTorch ranges in this report: there is no step time to break down."

    def scope_note(self, p: CpuBreakdown) -> str:  # type: ignore[override]
        """What one process's means cover, start-up included, in one line."""
        return scope_text(p, self.no_steps_why or self.step_source, self.step_counts.get(p.pid))

    def steps_table(self) -> Table:
        """Per step: duration and the share of each CPU part."""
        cols = [Column("PID", "id"), Column("Step"), Column("Duration", "ns")]
        cols += [Column(CPU_SHORT[p], "percent") for p in CPU_PARTS]
        cols.append(Column("Set-up Step"))
        rows: list[tuple[object, ...]] = []
        for p in self.processes:
            for r in p.steps.itertuples(index=False):
                d = float(r.duration_ns) or 1.0
                rows.append((p.pid, r.step, r.duration_ns, *(100.0 * float(getattr(r, k)) / d for k in CPU_PARTS),
                             "yes" if r.warmup else ""))
        notes = ["Shares of the step's wall time: waiting for the DataLoader, module forward, loss.backward(), "
                 "optimizer step and zero_grad, and the rest of the loop's Python; each row adds up to 100%."]
        return Table("cpu_step_parts", "CPU Step Time by Part", cols, rows, notes if rows else [])


def host_side(ctx: Any) -> tuple[list[CpuBreakdown], str]:
    """The host side's breakdown of a report with GPU work (``ctx``: its diagnosis context), for the
    processes whose steps PyTorch's ranges split (any part other than the rest of the Python), and
    the description of their steps; ([], "") where none did."""
    try:
        cpu = ctx.cpu_side
        out = []
        for p in cpu.processes:
            b = p.breakdown
            mean = b.mean_parts()
            if b.has_steps and any(round(mean[k]) for k in CPU_PARTS if k != "cpu_other"):
                out.append(b)
        return out, (cpu.steps.description if out else "")
    except Exception as exc:  # noqa: BLE001  (the GPU side's answer stands without it; said in the notes)
        ctx.notes.append(f"The host side's breakdown failed ({type(exc).__name__}: {exc}); the GPU side's above "
                         "is complete without it.")
        return [], ""


def diagnose_cpu(report: Report, rules: list[Rule] | None = None, min_share: float = MIN_SHARE) -> CpuDiagnosis:
    """Return the CPU-side diagnosis of a report without GPU operations.

    ``rules`` defaults to :data:`.rules.RULES`; those that do not read the CPU side (the GPU rules)
    are listed as not checked, with the reason.
    """
    from .rules import RULES

    ctx = CpuContext(report, min_share)
    findings, skipped = run_rules(ctx, RULES if rules is None else rules)
    findings = ranked(findings, ctx, lambda p: p.step_ns)
    processes = [p.breakdown for p in ctx.processes]
    from ..steps.probe import probe_timings

    ctx.notes += [f"Process {t.pid}: profiling's own cost, measured: {t.describe()}; the times above are of the "
                  "recorded steps." for t in probe_timings(report).values() if t.measured]
    stepped = any(p.has_steps for p in processes)
    source = ctx.steps.description if stepped else "no steps"
    why = "" if stepped else ctx.steps.description  # why none were found (steps/from_pattern.py)
    from .result import counts_by_process

    return CpuDiagnosis(step_source=source, processes=processes, findings=findings,  # type: ignore[arg-type]
                        skipped=skipped, notes=ctx.notes, min_share=min_share, startup=ctx.startup, no_steps_why=why,
                        step_counts=counts_by_process(report) if stepped else {})
