"""The HTML page of a report: ``gpuscope report`` writes it as one file, ``gpuscope view`` serves it.

:mod:`.content` gathers what the page shows from the analyses, :mod:`.page` writes the document
with its scripts (assets/, Chart.js vendored there with its license), :mod:`.server` answers the
viewer's window queries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...analysis.timeline_tracks import TimelineIndex
from ...trace.report import Report

# gpuscope report keeps its file to a few MB and its analyses to seconds: a report with more
# timeline slices than this is for gpuscope view (the same limit keeps the viewer from running
# the analyses that take minutes and gigabytes at that size).
FILE_EVENT_CAP = 2_000_000


def title_of(path: Path) -> str:
    """Return the page title for the report at ``path``."""
    return f"gpuscope: {path.name}"


def sections(report: Report, origin: int) -> dict[str, Any]:
    """Return every section but the timeline: run, breakdown and findings (their spans in timeline
    times: ns from ``origin``), roofline, stats tables."""
    from .content import diagnosis_data, roofline_data, run_info, stats_data

    return {"run": run_info(report), "diagnosis": diagnosis_data(report, origin),
            "roofline": roofline_data(report), "tables": stats_data(report)}


def file_page(report: Report, index: TimelineIndex) -> str:
    """Return the self-contained page of ``report`` (``gpuscope report``)."""
    from .content import timeline_static
    from .page import render

    title = title_of(report.path)
    data = {"mode": "file", "title": title, "content": sections(report, index.start_ns),
            "timeline": timeline_static(index, report)}
    return render(data, title)


def server_page(path: Path, index: TimelineIndex) -> str:
    """Return the page that ``gpuscope view`` serves: its timeline asks the server for windows and
    its other sections come from ``/api/content``."""
    from .page import render

    title = title_of(path)
    return render({"mode": "server", "title": title, "timeline": index.describe()}, title)
