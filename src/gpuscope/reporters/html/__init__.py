"""The HTML page of a report: ``gpuscope report`` writes it as one file, ``gpuscope view`` serves it.

:mod:`.content` gathers what the page shows from the analyses, :mod:`.page` writes the document
with its scripts (assets/, Chart.js vendored there with its license), :mod:`.server` answers the
viewer's window queries; :mod:`.try_section` the fixes ``gpuscope try`` measured, when given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...analysis.timeline.tracks import TimelineIndex
from ...trace.report import Report

# Past this many timeline slices the viewer computes the tables and findings in a process of its
# own, when asked (they take minutes and gigabytes at that size). gpuscope report computes them
# whatever the size; its file holds the slices that fit whole (:data:`.content.STATIC_SLICES`).
FILE_EVENT_CAP = 2_000_000


def title_of(path: Path) -> str:
    """Return the page title for the report at ``path``."""
    return f"gpuscope: {path.name}"


def sections(report: Report, origin: int) -> dict[str, Any]:
    """Return every section but the timeline: run, breakdown and findings (their spans in timeline
    times: ns from ``origin``), roofline, stats tables."""
    from .content import diagnosis_data, roofline_data, run_info, stats_data

    out = {"run": run_info(report), "diagnosis": diagnosis_data(report, origin),
           "roofline": roofline_data(report), "tables": stats_data(report)}
    missing = left_out(out)
    if missing:
        out["run"].setdefault("detail", []).append(
            f"Left out of this page (reading them needed more than gpuscope may use; each says which setting "
            f"raises it): {', '.join(missing)}. Everything else covers the whole run.")
    return out


def left_out(content: dict[str, Any]) -> list[str]:
    """The parts of the page's ``content`` (:func:`sections`) left out past a reading limit: the
    roofline, and the stats tables by name."""
    return ((["the roofline"] if content["roofline"].get("left_out") else [])
            + [f"table {t['name']}" for t in content["tables"] if t.get("left_out")])


def file_page(report: Report, index: TimelineIndex | Callable[[], TimelineIndex], budget: int | None = None,
              viewer: str = "gpuscope view", tried: dict[str, Any] | None = None,
              missing: list[str] | None = None) -> str:
    """Return the self-contained page of ``report`` (``gpuscope report``): every section, and the
    timeline with at most ``budget`` slices whole (default :data:`.content.STATIC_SLICES`), the
    lanes past them as summaries per pixel, which the page's run section says (naming ``viewer``,
    the command that shows every slice); with ``tried`` (:func:`.try_section.try_data`), the
    section of the fixes ``gpuscope try`` measured; ``missing`` gets the parts left out past a
    reading limit (:func:`left_out`). ``index``: the report's timeline index, or a function that
    makes it: then it is dropped once the page's timeline is drawn, before the other sections are
    read (its slices, hundreds of megabytes at millions of them, not held beside the diagnosis's)."""
    from .content import STATIC_SLICES, detail_note, timeline_static
    from .page import render

    title = title_of(report.path)
    made = index() if callable(index) else index
    timeline = timeline_static(made, report, STATIC_SLICES if budget is None else budget)
    note = detail_note(made, timeline, viewer)
    origin = made.start_ns
    del made, index
    content = sections(report, origin)
    if missing is not None:
        missing.extend(left_out(content))
    if note:
        content["run"].setdefault("detail", []).insert(0, note)
    if tried is not None:
        content["tried"] = tried
    return render({"mode": "file", "title": title, "content": content, "timeline": timeline}, title)


def server_page(path: Path, index: TimelineIndex) -> str:
    """Return the page that ``gpuscope view`` serves: its timeline asks the server for windows and
    its other sections come from ``/api/content``."""
    from .page import render

    title = title_of(path)
    return render({"mode": "server", "title": title, "timeline": index.describe()}, title)
