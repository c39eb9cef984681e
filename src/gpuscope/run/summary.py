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
    p = shlex.quote(str(path))
    return f"gpuscope analyze {p}, gpuscope stats {p}, gpuscope view {p}"


def _diagnosis(report: Report) -> tuple[str | None, str]:
    """How many steps were found and how, and the step-time breakdown with the top findings in a few
    lines. The profile is done by now, so a failure of the analysis is said in one line and the run
    goes on."""
    try:
        from ..analysis.diagnosis import diagnose
        from ..reporters.findings_table import render_short

        diag = diagnose(report)
        n = sum(len(p.steps) for p in diag.processes)
        steps = f"{n:,} step{'s' if n != 1 else ''}: {diag.step_source}" if n else "no steps found"
        return steps, render_short(diag, FINDINGS)
    except Exception as exc:  # noqa: BLE001  (reported below; the report itself is fine)
        return None, (f"gpuscope: the diagnosis failed ({type(exc).__name__}: {exc}); "
                      f"try: gpuscope analyze {shlex.quote(str(report.path))}\n")
