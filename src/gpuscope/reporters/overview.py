"""The end-of-profile summary as text."""

from __future__ import annotations

import io

from rich.console import Console

from ..analysis.overview import Overview
from .terminal import WIDE, to_rich
from .units import duration


def render(ov: Overview, width: int | None = None) -> str:
    """Return the summary of a profile: run, GPU busy time, top kernels, what was not recorded."""
    buf = io.StringIO()
    con = Console(file=buf, width=width or WIDE, no_color=True, highlight=False, color_system=None)
    wall = duration(ov.wall_ns) if ov.wall_ns else "?"
    con.print(f"Program: {' '.join(ov.command)}  ({ov.exit_description}, {wall} wall, "
              f"{ov.processes} process{'es' if ov.processes != 1 else ''})")
    counts = ", ".join(f"{n:,} {t.replace('_', ' ')}s" for t, n in ov.records.items() if n)
    con.print(f"Recorded: {counts or 'no GPU activity'}")
    for d in ov.devices:
        con.print(f"GPU {d.device_id} ({d.name}): busy {duration(d.busy_ns)} of {duration(d.span_ns)} "
                  f"from first to last GPU operation ({d.busy_percent:.1f}%), {d.kernels:,} kernels")
    if ov.top_kernels.rows:
        con.print(to_rich(ov.top_kernels))
    if ov.dropped:
        con.print("Dropped records: " + ", ".join(f"{k} {v:,}" for k, v in ov.dropped.items()))
    else:
        con.print("Dropped records: none")
    if ov.collector_overhead_ns:
        con.print(f"CPU time of gpuscope's CUPTI callbacks inside the program: {duration(ov.collector_overhead_ns)}")
    if any(ov.records.values()):  # what else could have been recorded matters once GPU work was
        for hint in ov.not_recorded.values():
            con.print(f"Not recorded: {hint}")
    for w in ov.warnings:
        con.print(f"Warning: {w}")
    return buf.getvalue()
