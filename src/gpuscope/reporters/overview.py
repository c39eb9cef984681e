"""The end-of-profile summary as text."""

from __future__ import annotations

from ..analysis.overview import Overview
from .terminal import format_table
from .units import duration


def render(ov: Overview) -> str:
    """Return the summary of a profile: run, GPU busy time, top kernels, what was not recorded."""
    wall = duration(ov.wall_ns) if ov.wall_ns else "?"
    plural = "es" if ov.processes != 1 else ""
    lines = [f"Program: {' '.join(ov.command)}  ({ov.exit_description}, {wall} wall, "
             f"{ov.processes} process{plural})"]
    counts = ", ".join(f"{n:,} {t.replace('_', ' ')}s" for t, n in ov.records.items() if n)
    lines.append(f"Recorded: {counts or 'no GPU activity'}")
    for d in ov.devices:
        lines.append(f"GPU {d.device_id} ({d.name}): busy {duration(d.busy_ns)} of {duration(d.span_ns)} "
                     f"from first to last GPU operation ({d.busy_percent:.1f}%), {d.kernels:,} kernels")
    if ov.top_kernels.rows:
        lines.append(format_table(ov.top_kernels).rstrip("\n"))
    if ov.top_functions is not None and ov.top_functions.rows:
        lines.append(format_table(ov.top_functions).rstrip("\n"))
    if ov.host_advice:
        lines.append(ov.host_advice)
    dropped = ", ".join(f"{k} {v:,}" for k, v in ov.dropped.items())
    lines.append(f"Dropped records: {dropped or 'none'}")
    if ov.collector_overhead_ns:
        lines.append("CPU time of gpuscope's CUPTI callbacks inside the program: "
                     + duration(ov.collector_overhead_ns))
    if any(ov.records.values()):  # what else could have been recorded matters once GPU work was
        lines += [f"Not recorded: {hint}" for hint in ov.not_recorded.values()]
    lines += [f"Warning: {w}" for w in ov.warnings]
    return "\n".join(lines) + "\n"
