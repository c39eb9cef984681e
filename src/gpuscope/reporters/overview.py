"""The end-of-profile page as text: what ran, the heaviest kernels, layers and lines, what was not
recorded and what collecting cost. The step breakdown and the findings come between the head and
the body (run/summary.py puts them there)."""

from __future__ import annotations

import re
import textwrap

from ..analysis.steps.capture import CaptureSummary
from ..analysis.steps.overhead import CollectionOverhead
from ..analysis.overview import Overview
from ..safe_text import terminal as safe
from ..units import duration
from .terminal import format_table, terminal_width


def render_head(ov: Overview, steps: str | None = None, width: int | None = None) -> str:
    """Return the lines on what ran: the program (quoted for the shell), exit, wall time, processes,
    ``steps`` (how many were found, and how), what GPU work was recorded and each GPU's busy time."""
    wall = duration(ov.wall_ns) if ov.wall_ns else "?"
    plural = "es" if ov.processes != 1 else ""
    found = f"; {steps}" if steps else ""
    lines = [_wrap(f"Program: {safe(shell_join(ov.command))}  ({ov.exit_description}, {wall} wall, "
                   f"{ov.processes} process{plural}{safe(found)})", width or terminal_width())]
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
        lines.append(_wrap(safe(overhead_line(ov.overhead)), width))
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


AT_MOST_SAID = 0.5  # the bound from the busiest GPU is said where it says something: at most 50% longer
PROBE_LEAVES_OUT = ("what stays on while a probe runs (the step marks, the wrappers that pass calls straight "
                    "through, CUPTI's subscription): a lower bound of the cost")


def overhead_line(o: CollectionOverhead) -> str:
    """What collecting cost, as one estimate: with an overhead probe that timed steps with collection
    off, its measurement (``collection made a step 28% longer (±9%)``, or ``no measurable slowdown
    (within the noise: ±12%)``), what it rests on and leaves out, then the parts gpuscope times
    (``0.21 s in the program (2.3% of 9.1 s wall): CUPTI buffers 0.12 s, ...; not included: ...``);
    without one, that the cost was not measured, and the parts as a lower bound. Estimated parts carry a ``~``."""
    share = f" ({o.percent:.1f}% of {duration(o.wall_ns)} wall)" if o.percent is not None and o.wall_ns else ""
    parts = ", ".join(f"{p.name} {'~' if p.estimated else ''}{duration(p.ns)}" for p in o.parts)
    timed = f"{duration(o.total_ns)} in the program{share}"
    if parts:
        timed += f": {parts}"
    if o.not_measured:
        timed += f" ({', '.join(o.not_measured)}: not measured in this report)"
    if o.unseen:
        timed += f"; not included: {'; '.join(o.unseen)}"
    if o.probes:
        said = [f"{t.verdict()}, measured by the overhead probe in process {t.pid}: {t.evidence()}" for t in o.probes]
        line = "Collection overhead: " + "; ".join(said) + f". It leaves out {PROBE_LEAVES_OUT}"
        line += f". The parts gpuscope times: {timed}"
        added = sum(t.added_ns() for t in o.probes)
        if added and o.total_ns < 0.5 * added:
            # both are true: the parts are what gpuscope can time, the probe sees everything
            line += (f"; together less than the {duration(added)} the probe measured over the recorded steps: "
                     "the rest is what they can not see")
        return line
    # no probe measured: said first, plainly, so that the parts are not read as the slowdown (on
    # launch-heavy programs CUPTI's own cost per kernel was most of it, and only timing the program
    # without collection sees it: bench/RESULTS.md, real-client programs)
    why = "; ".join(f"the overhead probe in process {t.pid}: {t.describe()}" for t in o.unmeasured)
    line = (f"Collection overhead: not measured ({why or 'no overhead probe timed the program with collection off'})"
            f". What gpuscope times, a lower bound: {timed}")
    if any(p.name == "CUPTI in CUDA calls" for p in o.parts):
        line += ". What CUPTI adds to each kernel beyond the launch call is not counted"
    if o.at_most is not None and o.busiest is not None and o.at_most <= AT_MOST_SAID:
        d = o.busiest
        line += (f". At most {o.at_most:.0%} longer over the recorded span: GPU {d.device_id} was busy "
                 f"{d.busy_ns / d.span_ns:.0%} of it, and its work takes as long without the profiler")
        if o.percent is not None and o.at_most * 100 < o.percent:
            line += " (collection's time on the host overlapped the GPU's work)"
    return line
