"""The diagnosis as terminal text: the step-time breakdown, the steps, then the findings ranked.

Laid out with rich (a few small tables, so its layout engine costs nothing noticeable), rendered
to plain text at most :data:`WIDTH` characters wide, or the terminal's width (``COLUMNS``) where that
is less; notes wrap at the same width.
"""

from __future__ import annotations

import io
import textwrap

from rich import box
from rich.console import Console
from rich.table import Table as RichTable

from ..analysis.diagnosis import Diagnosis, Finding
from ..analysis.diagnosis.cpu_breakdown import CPU_PARTS, CPU_SHORT, CpuBreakdown
from ..analysis.diagnosis.cpu_diagnosis import GPU_REASON, CpuDiagnosis
from ..analysis.table import Table
from ..safe_text import terminal as safe
from ..units import duration, human
from .terminal import terminal_width

WIDTH = 100  # prose wider than this reads badly, however wide the terminal
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
        of = "the run" if f.data.get("share_of") == "run" else "the capture's steps"
        return f"{duration(f.saving_ns)} once ({f.share:.1%} of {of})"
    if f.work_changing:
        return f"~{duration(f.saving_ns)} per step's worth of samples ({f.share:.1%} per sample; changes the work)"
    return f"~{duration(f.saving_ns)} per step ({f.share:.1%} of the step)"


def _rich_table(table: Table) -> RichTable:
    """``table`` in human units, numbers right-aligned (its notes are printed after it)."""
    t = RichTable(title=safe(f"{table.title} ({table.name})"), title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    for c in table.columns:
        t.add_column(safe(c.label), justify="left" if c.unit == "text" else "right", overflow="fold")
    for row in table.rows:
        t.add_row(*(safe(human(v, c.unit)) for v, c in zip(row, table.columns)))
    return t


def _findings(diag: Diagnosis) -> RichTable:
    t = RichTable(box=box.SIMPLE_HEAD, pad_edge=False, show_lines=True,
                  title="Findings, ranked by estimated saving", title_justify="left")
    t.add_column("#", justify="right")
    t.add_column("Finding", overflow="fold")
    t.add_column("Saves", overflow="fold", max_width=24)
    for i, f in enumerate(diag.findings, 1):
        body = [safe(f"{f.title}  [{f.rule}]"), *(safe(f"evidence: {e}") for e in f.evidence),
                safe(f"where: {f.location}"), safe(f"fix: {f.fix}")]
        t.add_row(str(i), "\n".join(body), saving_text(f) + ("\n(expected cost)" if f.advisory else ""))
    return t


def render(diag: Diagnosis) -> str:
    """Return the whole diagnosis as text."""
    out = io.StringIO()
    width = min(WIDTH, terminal_width())
    console = Console(file=out, width=width, color_system=None, force_terminal=False, highlight=False,
                      emoji=False, markup=False)
    host = diag.host_table()
    tables = [diag.breakdown_table(), *([host] if host else [])] + ([_steps(diag.steps_table())] if diag.processes else [])
    for table in tables:
        console.print(_rich_table(table))
        for note in table.notes:
            console.print(_wrap(safe(note), width, "  "), soft_wrap=True)
        console.print()
    if diag.findings:
        console.print(_findings(diag))
    else:
        console.print(_wrap(f"Findings, ranked by estimated saving: {none_above(diag)}", width, ""), soft_wrap=True)
    if diag.skipped:
        console.print("\nNot checked", soft_wrap=True)
        for rules, reason in skipped_lines(diag):
            console.print(_wrap(safe(f"{rules}: {reason}"), width, "  "), soft_wrap=True)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def _wrap(text: str, width: int, indent: str) -> str:
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent + "  ", break_on_hyphens=False)


def none_above(diag: Diagnosis) -> str:
    """``none above 1% of the step``, with the threshold the diagnosis used."""
    return f"none above {100 * diag.min_share:g}% of the step"


GPU_RULES_LINE = ("not checked, no GPU operations recorded (--trace cuda records them on a machine with an "
                  "NVIDIA GPU)")


def skipped_lines(diag: Diagnosis) -> list[tuple[str, str]]:
    """The rules not checked, as (rules, reason) lines. A CPU diagnosis lists the GPU rules, which all
    share one reason, on one line."""
    if not isinstance(diag, CpuDiagnosis):
        return [(sk.rule, sk.reason) for sk in diag.skipped]
    grouped: dict[str, list[str]] = {}
    for sk in diag.skipped:
        grouped.setdefault(sk.reason, []).append(sk.rule)
    # every GPU rule has the one reason: said once, not rule by rule (--format json lists them)
    return [("GPU rules", GPU_RULES_LINE) if reason == GPU_REASON else (", ".join(rules), reason)
            for reason, rules in grouped.items()]


def _cpu_short(p: CpuBreakdown) -> str:
    """The CPU breakdown of one process in one line."""
    mean = p.mean_parts()
    step = mean["duration_ns"] or 1.0
    parts = sorted(((mean[k], k) for k in CPU_PARTS if mean[k] >= 0.01 * step), reverse=True)
    text = ", ".join(f"{CPU_SHORT[k].lower()} {100 * v / step:.0f}%" for v, k in parts)
    what = "step" if p.has_steps else "run after start-up"
    return f"CPU step time ({what} {duration(step)}, process {p.pid}; no GPU operations): {text}"


def render_short(diag: Diagnosis, top: int = 3) -> str:
    """A few lines for the end of ``gpuscope profile``: the breakdown in one line, the top findings."""
    lines = []
    for p in diag.processes:
        if isinstance(p, CpuBreakdown):
            lines.append(_cpu_short(p))
            continue
        mean = p.mean_parts()
        step = mean["duration_ns"] or 1.0
        busy = sum(v for k, v in mean.items() if k.startswith("busy_"))
        idle = sorted(((v, k) for k, v in mean.items() if k.startswith("idle_") and v >= 0.01 * step), reverse=True)
        parts = ", ".join(f"{k[5:]} {100 * v / step:.0f}%" for v, k in idle)
        what = "step" if p.has_steps else "capture"
        lines.append(f"Step time ({what} {duration(step)}, process {p.pid}): GPU busy {100 * busy / step:.0f}%"
                     + (f"; idle: {parts}" if parts else ""))
    width = terminal_width()
    lines = [textwrap.fill(line, width, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)
             for line in lines]
    for i, f in enumerate(diag.findings[:top], 1):
        lines.append(_wrap(safe(f"{i}. {f.title} - saves {saving_text(f)}"), width, "  "))
        lines.append(_wrap(safe(f"fix: {textwrap.shorten(f.fix, 110, placeholder=' ...')}"), width, "     "))
    return "\n".join(lines) + ("\n" if lines else "")
