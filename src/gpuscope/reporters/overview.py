"""The end-of-profile summary as text."""

from __future__ import annotations

from ..analysis.capture_summary import CaptureSummary
from ..analysis.overhead import CollectionOverhead
from ..analysis.overview import Overview
from ..safe_text import terminal as safe
from .terminal import format_table
from ..units import duration


def render(ov: Overview) -> str:
    """Return the summary of a profile: run, GPU busy time, top kernels, what was not recorded."""
    wall = duration(ov.wall_ns) if ov.wall_ns else "?"
    plural = "es" if ov.processes != 1 else ""
    lines = [f"Program: {safe(' '.join(ov.command))}  ({ov.exit_description}, {wall} wall, "
             f"{ov.processes} process{plural})"]
    counts = ", ".join(f"{n:,} {t.replace('_', ' ')}s" for t, n in ov.records.items() if n)
    lines.append(f"Recorded: {counts or 'no GPU activity'}")
    if ov.capture is not None:
        lines.append(safe(capture_line(ov.capture)))
    for d in ov.devices:
        lines.append(f"GPU {d.device_id} ({safe(d.name)}): busy {duration(d.busy_ns)} of {duration(d.span_ns)} "
                     f"from first to last GPU operation ({d.busy_percent:.1f}%), {d.kernels:,} kernels")
    if ov.top_kernels.rows:
        lines.append(format_table(ov.top_kernels).rstrip("\n"))
    if ov.top_functions is not None and ov.top_functions.rows:
        lines.append(format_table(ov.top_functions).rstrip("\n"))
    if ov.host_advice:
        lines.append(safe(ov.host_advice))
    dropped = ", ".join(f"{k} {v:,}" for k, v in ov.dropped.items())
    lines.append(f"Dropped records: {dropped or 'none'}")
    if ov.overhead is not None:
        lines.append(overhead_line(ov.overhead))
    if any(ov.records.values()):  # what else could have been recorded matters once GPU work was
        lines += [f"Not recorded: {safe(hint)}" for hint in ov.not_recorded.values()]
    lines += [f"Warning: {safe(w)}" for w in ov.warnings]
    return "\n".join(lines) + "\n"


def capture_line(c: CaptureSummary) -> str:
    """``Capture range: steps 10 to 20 (1 window, 1.52 s recorded)``."""
    plural = "" if c.windows == 1 else "s"
    return f"Capture range: {c.description} ({c.windows} window{plural}, {duration(c.captured_ns)} recorded)"


def overhead_line(o: CollectionOverhead) -> str:
    """``Collection overhead: 0.21 s in the program (2.3% of 9.1 s wall): CUPTI buffers 0.12 s, ...;
    not included: ...``; estimated parts carry a ``~``, and what the estimate can not see ends it."""
    share = f" ({o.percent:.1f}% of {duration(o.wall_ns)} wall)" if o.percent is not None and o.wall_ns else ""
    parts = ", ".join(f"{p.name} {'~' if p.estimated else ''}{duration(p.ns)}" for p in o.parts)
    line = f"Collection overhead: {duration(o.total_ns)} in the program{share}"
    if parts:
        line += f": {parts}"
    if o.not_measured:
        line += f" ({', '.join(o.not_measured)}: not measured in this report)"
    if o.unseen:
        line += f"; not included: {'; '.join(o.unseen)}"
    return line
