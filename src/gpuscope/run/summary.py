"""The summary printed at the end of a profiling run (``gpuscope profile``, ``gpuscope.profile()``)."""

from __future__ import annotations

from pathlib import Path

from ..analysis import stats_reports
from ..analysis.overview import overview
from ..reporters import overview as overview_text
from ..reporters import terminal
from ..trace.report import Report


def end_of_run(path: Path, said: set[str], diagnosis: bool = False, stats: bool = False) -> str:
    """Return the text printed at the end of a run that wrote the report ``path``: the overview (less
    the warnings in ``said``, printed live already), then with ``diagnosis`` the step breakdown and
    the top findings, and with ``stats`` every stats report."""
    with Report.open(path) as report:
        ov = overview(report)
        ov.warnings = [w for w in ov.warnings if w not in said]  # said once already, live
        text = overview_text.render(ov)
        if diagnosis:
            text += _diagnosis(report)
        if stats:
            text += terminal.render([fn(report) for fn in stats_reports().values()])
    return text


def _diagnosis(report: Report) -> str:
    """The step-time breakdown and the top findings in a few lines. The profile is done by now, so a
    failure of the analysis is said in one line and the run goes on."""
    try:
        from ..analysis.diagnosis import diagnose
        from ..reporters.findings_table import render_short

        return render_short(diagnose(report))
    except Exception as exc:  # noqa: BLE001  (reported below; the report itself is fine)
        return (f"gpuscope: the diagnosis failed ({type(exc).__name__}: {exc}); "
                f"try: gpuscope analyze {report.path}\n")
