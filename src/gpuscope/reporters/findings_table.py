"""The diagnosis as terminal text: the step-time breakdown, the steps, then the findings ranked."""

from __future__ import annotations

import textwrap

from ..analysis.diagnosis import Diagnosis, Finding
from ..analysis.table import Table
from .terminal import format_table
from .units import duration

WIDTH = 100
MAX_STEPS = 12  # steps shown in the per-step table; json and markdown carry all


def _steps(table: Table) -> Table:
    if len(table.rows) <= MAX_STEPS:
        return table
    rest = len(table.rows) - MAX_STEPS
    return Table(table.name, table.title, table.columns, table.rows[:MAX_STEPS],
                 [*table.notes, f"... {rest} more steps (--format json or markdown shows all)"])


def saving_text(f: Finding) -> str:
    """``saves ~1.2 ms per step (10.0% of the step)``, or the one-time form."""
    if f.one_time:
        return f"{duration(f.saving_ns)} once ({f.share:.1%} of the capture's steps)"
    return f"~{duration(f.saving_ns)} per step ({f.share:.1%} of the step)"


def format_finding(i: int, f: Finding) -> str:
    """One finding as an indented block."""
    wrap = textwrap.TextWrapper(width=WIDTH, initial_indent="", subsequent_indent=" " * 14)
    lines = [f"{i:>2}. {f.title}  [{f.rule}]"]
    lines.append(wrap.fill(f"    saves     {saving_text(f)}" + ("  (expected cost)" if f.advisory else "")))
    for j, e in enumerate(f.evidence):
        lines.append(wrap.fill(f"    {'evidence' if j == 0 else '':<10}{e}"))
    lines.append(wrap.fill(f"    where     {f.location}"))
    lines.append(wrap.fill(f"    fix       {f.fix}"))
    return "\n".join(lines)


def render(diag: Diagnosis) -> str:
    """Return the whole diagnosis as text."""
    out = [format_table(diag.breakdown_table())]
    if diag.processes:
        out.append(format_table(_steps(diag.steps_table())))
    out.append("Findings, ranked by estimated saving\n")
    if diag.findings:
        out.append("\n\n".join(format_finding(i, f) for i, f in enumerate(diag.findings, 1)) + "\n")
    else:
        out.append("  none above 1% of the step\n")
    if diag.skipped:
        out.append("\nNot checked\n")
        out.append("".join(f"  {s.rule}: {s.reason}\n" for s in diag.skipped))
    return "\n".join(out)


def render_short(diag: Diagnosis, top: int = 3) -> str:
    """A few lines for the end of ``gpuscope profile``: the breakdown in one line, the top findings."""
    lines = []
    for p in diag.processes:
        mean = p.mean_parts()
        step = mean["duration_ns"] or 1.0
        busy = sum(v for k, v in mean.items() if k.startswith("busy_"))
        idle = sorted(((v, k) for k, v in mean.items() if k.startswith("idle_") and v >= 0.01 * step), reverse=True)
        parts = ", ".join(f"{k[5:]} {100 * v / step:.0f}%" for v, k in idle)
        what = "step" if p.has_steps else "capture"
        lines.append(f"Step time ({what} {duration(step)}, process {p.pid}): GPU busy {100 * busy / step:.0f}%"
                     + (f"; idle: {parts}" if parts else ""))
    for i, f in enumerate(diag.findings[:top], 1):
        lines.append(f"  {i}. {f.title} - saves {saving_text(f)}")
        lines.append(f"     fix: {textwrap.shorten(f.fix, 110, placeholder=' ...')}")
    return "\n".join(lines) + ("\n" if lines else "")
