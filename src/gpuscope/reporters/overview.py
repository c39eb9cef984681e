"""The end-of-profile page as text: what ran, the heaviest kernels, layers and lines, what was not
recorded and what collecting cost. The step breakdown and the findings come between the head and
the body (run/summary.py puts them there)."""

from __future__ import annotations

import re
import textwrap

from ..analysis.capture_summary import CaptureSummary
from ..analysis.overhead import CollectionOverhead
from ..analysis.overview import Overview
from ..safe_text import terminal as safe
from ..units import duration
from .terminal import format_table, terminal_width


def render_head(ov: Overview, steps: str | None = None) -> str:
    """Return the lines on what ran: the program (quoted for the shell), exit, wall time, processes,
    ``steps`` (how many were found, and how), what GPU work was recorded and each GPU's busy time."""
    wall = duration(ov.wall_ns) if ov.wall_ns else "?"
    plural = "es" if ov.processes != 1 else ""
    found = f"; {steps}" if steps else ""
    lines = [f"Program: {safe(shell_join(ov.command))}  ({ov.exit_description}, {wall} wall, "
             f"{ov.processes} process{plural}{safe(found)})"]
    counts = ", ".join(f"{n:,} {t.replace('_', ' ')}s" for t, n in ov.records.items() if n)
    if counts:
        lines.append(f"Recorded: {counts}")
    if ov.capture is not None:
        lines.append(safe(capture_line(ov.capture)))
    for d in ov.devices:
        lines.append(f"GPU {d.device_id} ({safe(d.name)}): busy {duration(d.busy_ns)} of {duration(d.span_ns)} "
                     f"from first to last GPU operation ({d.busy_percent:.1f}%), {d.kernels:,} kernels")
    return "\n".join(lines) + "\n"


def render_body(ov: Overview, width: int | None = None) -> str:
    """Return the heaviest kernels, layers and lines (tables that have rows only), then the host's
    use, dropped records, what collecting cost, what was not recorded and the warnings."""
    width = width or terminal_width()
    lines = []
    for table in (ov.top_kernels, ov.top_layers, ov.top_functions):
        if table is not None and table.rows:
            lines.append(format_table(table, width).rstrip("\n").replace("\n\n", "\n", 1))
    if ov.host_advice:
        lines.append(_wrap(safe(ov.host_advice), width))
    dropped = ", ".join(f"{k} {v:,}" for k, v in ov.dropped.items())
    lines.append(f"Dropped records: {dropped or 'none'}")
    if ov.overhead is not None:
        lines.append(overhead_line(ov.overhead))
    if ov.not_recorded:
        lines.append(_wrap("Not recorded: " + "; ".join(safe(short_hint(h)) for h in ov.not_recorded.values()), width))
    lines += [f"Warning: {safe(w)}" for w in ov.warnings]
    return "\n".join(lines) + "\n"


def short_hint(hint: str) -> str:
    """``CUDA API calls (--trace cuda-api)`` for a stored hint ``CUDA API calls and ... : add --trace cuda-api``."""
    option = re.search(r"add (--trace [\w-]+)", hint)
    if option is None:
        return hint
    what = re.split(r" \(|:| and ", hint, maxsplit=1)[0]
    return f"{what} ({option.group(1)})"


def _wrap(text: str, width: int) -> str:
    return textwrap.fill(text, width, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)


def render(ov: Overview) -> str:
    """Return the summary of a profile without the diagnosis: :func:`render_head`, :func:`render_body`."""
    return render_head(ov) + render_body(ov)


def shell_join(argv: list[str]) -> str:
    """Return ``argv`` as one command line a POSIX shell reads back as the same words."""
    import shlex

    return shlex.join(argv) if argv else "?"


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
    for t in o.probes:
        line += f". Measured in process {t.pid}: {t.describe()}"
    if not o.probes and any(p.name == "CUPTI in CUDA calls" for p in o.parts):
        # on launch-heavy programs CUPTI's own cost per kernel was most of the slowdown, and only
        # timing steps without collection sees it (bench/RESULTS.md, real-client programs)
        line += (". A lower bound, not a measurement: no overhead probe timed steps without collection, and "
                 "what CUPTI adds to each kernel beyond the launch call is not counted")
    return line
