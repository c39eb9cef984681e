"""The summary printed at the end of a profiling run (``gpuscope profile``, ``gpuscope.profile()``).

A page of about 40 lines: what ran, where the step time went, the top findings with their saving,
the heaviest kernels, layers and lines of the program, what was not recorded and what collecting
cost. ``stats`` adds every stats report after it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ..analysis import stats_reports
from ..analysis.overview import overview
from ..reporters import overview as overview_text
from ..reporters import terminal
from ..trace.outputs import readable_name
from ..trace.report import Report

FINDINGS = 3  # findings on the page; gpuscope analyze shows them all


def end_of_run(path: Path, said: set[str], diagnosis: bool = False, stats: bool = False) -> str:
    """Return the text printed at the end of a run that wrote the report ``path``: the page (less
    the warnings in ``said``, printed live already; the step breakdown and the top findings with
    ``diagnosis``), and with ``stats`` every stats report."""
    with readable_name(path) as name, Report.open(name) as report:
        ov = overview(report)
        ov.warnings = [w for w in ov.warnings if w not in said]  # said once already, live
        steps, middle = _diagnosis(report) if diagnosis else (None, "")
        text = overview_text.render_head(ov, steps) + middle + overview_text.render_body(ov)
        if stats:
            text += "\n" + terminal.render([fn(report) for fn in stats_reports().values()])
    return text


def next_commands(path: Path) -> str:
    """The closing line's commands to look at the report ``path``, quoted for the shell."""
    return ", ".join(_next(path))


def _next(path: Path) -> list[str]:
    p = shlex.quote(str(path))
    return [f"gpuscope {command} {p}" for command in ("analyze", "stats", "view")]


def closing_line(path: Path, records: int, width: int | None = None) -> str:
    """``gpuscope: wrote PATH (N records); next: ...`` on one line where it fits ``width`` (the
    terminal's), else the commands one a line below it, indented, so that each can be copied whole
    (a path is never broken). Safe to print: the path's control characters are escaped."""
    from ..reporters.terminal import terminal_width
    from ..safe_text import terminal

    head = terminal(f"gpuscope: wrote {path} ({records:,} records); next:")
    commands = [terminal(c) for c in _next(path)]
    line = f"{head} {', '.join(commands)}"
    if len(line) <= (width or terminal_width()):
        return line
    return "\n".join([head, *(f"  {c}" for c in commands)])


def _diagnosis(report: Report) -> tuple[str | None, str]:
    """How many steps were found and how, and the step-time breakdown with the top findings in a few
    lines. The profile is done by now, so a failure of the analysis is said in one line and the run
    goes on."""
    try:
        from ..analysis.diagnosis import diagnose
        from ..reporters.findings_table import render_short

        from ..analysis.steps.counts import describe_counts, step_counts
        from ..analysis.steps.source import step_source
        from ..trace.trim import capture_limited

        diag = diagnose(report)
        source = step_source(report)
        counts = step_counts(report, source)
        steps = describe_counts(counts, source.description, capture_limited(report.meta))
        return steps, render_short(diag, FINDINGS)
    except Exception as exc:  # noqa: BLE001  (reported below; the report itself is fine)
        return None, (f"gpuscope: the diagnosis failed ({type(exc).__name__}: {exc}); "
                      f"try: gpuscope analyze {shlex.quote(str(report.path))}\n")
