"""The diagnosis of a report without GPU operations: the CPU side is all there is.

``diagnose_cpu(report)`` splits each steady step's wall time into data loading, forward, backward,
optimizer and other Python (:mod:`.cpu_breakdown`), runs the CPU rules (:mod:`.cpu_rules`) and ranks
their findings by the time the fix saves per step. The GPU rules are listed as not checked. The
result is a :class:`CpuDiagnosis`: a :class:`Diagnosis` whose tables show the CPU parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...trace.report import Report
from ..table import Column, Table
from . import Diagnosis
from .context import MIN_SHARE, fmt_ns
from .cpu_breakdown import CPU_LABELS, CPU_PARTS, CPU_SHORT, CpuBreakdown
from .cpu_context import CpuContext
from .cpu_rules import CPU_RULES, CpuRule
from .finding import Finding, Skipped
from .rule import Rule

__all__ = ["CpuDiagnosis", "diagnose_cpu"]

GPU_REASON = ("no GPU operations in this report: the CPU side is diagnosed instead (--trace cuda records GPU "
              "work on a machine with an NVIDIA GPU)")


@dataclass
class CpuDiagnosis(Diagnosis):
    """A diagnosis of the CPU side: ``processes`` hold :class:`.cpu_breakdown.CpuBreakdown`."""

    parts: tuple[str, ...] = field(default=CPU_PARTS)

    def breakdown_table(self) -> Table:
        """Per process, the mean time per steady step of each CPU part (parts that are zero left out)."""
        cols = [Column("PID", "id"), Column("Part"), Column("Per Step", "ns"), Column("Share", "percent")]
        rows: list[tuple[object, ...]] = []
        notes = list(self.notes)
        for p in self.processes:
            mean = p.mean_parts()
            step = mean["duration_ns"]
            for part in CPU_PARTS:
                if round(mean[part]):
                    rows.append((p.pid, CPU_LABELS[part], mean[part], 100.0 * mean[part] / step if step else 0.0))
            rows.append((p.pid, "Step (total)", step, 100.0))
            notes.append(_scope(p, self.step_source))  # type: ignore[arg-type]
        if not self.processes:
            notes.append("No Python samples or PyTorch ranges in this report: there is no step time to break down.")
        return Table("cpu_step_breakdown", "CPU Step-Time Breakdown (no GPU operations)", cols, rows, notes)

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


def _scope(p: CpuBreakdown, source: str) -> str:
    startup = f"; start-up before it: {fmt_ns(p.startup_ns)}" if p.startup_ns else ""
    if not p.has_steps:
        return (f"Process {p.pid}: no steps, so the run after start-up counts as one window "
                f"({fmt_ns(float(p.steps['duration_ns'].sum()))}){startup}.")
    warm = int(p.steps["warmup"].sum())
    steady = len(p.steady)
    text = f"Process {p.pid}: mean of {steady} steady step{'s' if steady != 1 else ''}; steps: {source}"
    if warm and warm < len(p.steps):
        text += f"; {warm} set-up/warm-up step{'s' if warm > 1 else ''} left out"
    return text + startup + "."


def _within_step(ctx: CpuContext, findings: list[Finding]) -> list[Finding]:
    """Cap each process's savings, in order, so that they never add up to more than its step."""
    left = {p.pid: p.step_ns for p in ctx.processes}
    share = {p.pid: p.share for p in ctx.processes}
    out = []
    for f in sorted(findings, key=lambda f: -f.share):
        if f.one_time or f.advisory or f.pid not in left:
            out.append(f)
            continue
        saving = min(f.saving_ns, max(0.0, left[f.pid]))
        left[f.pid] -= saving
        if saving < f.saving_ns:
            f.evidence.append(f"capped at {fmt_ns(saving)}: the fixes ranked above it take the rest of the step")
            f.saving_ns, f.share = saving, share[f.pid](saving)
        if f.share >= ctx.min_share:
            out.append(f)
    return out


def diagnose_cpu(report: Report, rules: list[Rule] | None = None, min_share: float = MIN_SHARE) -> CpuDiagnosis:
    """Return the CPU-side diagnosis of a report without GPU operations.

    ``rules`` defaults to :data:`.cpu_rules.CPU_RULES`; rules given that are not CPU rules (the GPU
    rules) are listed as not checked, with the reason.
    """
    from .rules import RULES

    ctx = CpuContext(report, min_share)
    cpu_rules = CPU_RULES if rules is None else [r for r in rules if isinstance(r, CpuRule)]
    gpu_rules = RULES if rules is None else [r for r in rules if not isinstance(r, CpuRule)]
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    for rule in cpu_rules:
        reason = rule.skip(ctx)  # type: ignore[arg-type]
        if reason:
            skipped.append(Skipped(rule.name, reason))
            continue
        findings += rule.evaluate(ctx)
    findings = _within_step(ctx, findings)
    findings.sort(key=lambda f: (f.advisory, -f.share, f.rule, f.title))
    skipped += [Skipped(r.name, GPU_REASON) for r in gpu_rules]
    processes = [p.breakdown for p in ctx.processes]
    stepped = any(p.has_steps for p in processes)
    source = ctx.steps.description if stepped else "no steps"
    return CpuDiagnosis(step_source=source, processes=processes, findings=findings,  # type: ignore[arg-type]
                        skipped=skipped, notes=ctx.notes)
