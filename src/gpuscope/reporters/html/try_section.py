"""The page's section of fixes tried (``gpuscope report REPORT --try RESULT.json``), as plain data.

Every text comes from :mod:`..try_text`, the functions that write ``gpuscope try``'s own output, so
the page says what the terminal said; the fixes are one table in the cells of
:func:`.content.table_data` (``[raw value, text]``: sorted by the value, shown as the text). The
page's script puts every text on screen as text (``textContent``), never as markup.
"""

from __future__ import annotations

from typing import Any

from ...experiment.measure import FixResult, TryResult
from ...safe_text import terminal
from ...units import duration
from .. import try_text

COLUMNS = [("Fix", "text"), ("What it changes", "text"), ("Answers", "text"), ("Estimated gain", "percent"),
           ("Measured gain", "percent"), ("Step as written", "ns"), ("Step with the fix", "ns"), ("Status", "text"),
           ("Applied", "text"), ("Numbers", "text")]
STATUS_WORDS = {"measured": "measured", "not applied": "not applied", "crashed": "crashed", "no steps": "too few steps"}


def _share(v: float | None) -> list[Any]:
    return [None if v is None else round(100 * v, 2), try_text.pct(v)]


def _step(ns: float | None) -> list[Any]:
    return [None if ns is None else int(ns), "-" if not ns else duration(ns)]


def _status(f: FixResult) -> str:
    """The fix's status in the words of ``gpuscope try``: measured (and the verdict), not applied and
    why, the crash and its error line, or too few steps and why."""
    if f.status == "crashed":
        return try_text.crash_text(f)
    if f.status == "not applied":
        return f"not applied: {terminal(f.detail)}"
    if f.status == "no steps":
        return f"too few steps, not measured: {terminal(f.detail)}"
    return f"measured -> {f.verdict}" if f.verdict else "measured"


def _row(f: FixResult, base_ns: float | None) -> list[list[Any]]:
    fix = f.planned.fix
    measured = f.status == "measured"
    what = terminal(fix.title) + (" (changes numerics)" if fix.changes_numerics else "")
    applied = [terminal(f.detail)] if measured else []
    compiled = try_text.compile_text(f)
    if compiled:
        applied.append(compiled)
    numbers = try_text.numbers_text(f) if measured else "-"
    status = _status(f)
    return [_text(terminal(fix.name)), _text(what), _text(try_text.answers_text(f)), _share(f.planned.estimate),
            [None if f.gain is None else round(100 * f.gain.median, 2), try_text.gain_text(f)],
            _step(base_ns if measured else None), _step(f.step_ns), [STATUS_WORDS.get(f.status, f.status), status],
            _text("; ".join(applied) or "-"), _text(numbers)]


def _text(text: str) -> list[str]:
    return [text, text]


def try_data(result: TryResult, source: str) -> dict[str, Any]:
    """Return the section: ``facts`` (label, text) as ``gpuscope try`` heads its output, ``fixes`` a
    table (one row per fix, ``[raw, text]`` cells), ``not_tried`` the top findings that need a code
    change (lines), ``lines`` the closing notes (no fix to try, the unconfirmed ones)."""
    facts = [("Result", terminal(source)), ("Program", try_text.program_line(result)),
             ("How steps were timed", try_text.timing_line(result)),
             ("The program as written", try_text.baseline_line(result))]
    if result.report:
        facts.insert(1, ("Findings from", terminal(result.report)))
    if result.top_findings:
        facts.append(("Top findings", ", ".join(terminal(r) for r in result.top_findings)))
    table = {"name": "fixes_tried", "title": "Fixes tried", "notes": [],
             "columns": [{"label": label, "unit": unit} for label, unit in COLUMNS],
             "rows": [_row(f, result.step_ns) for f in result.fixes]}
    lines = [] if result.fixes else [try_text.NO_FIX]
    unconfirmed = try_text.unconfirmed_line(result)
    if unconfirmed:
        lines.append(unconfirmed)
    return {"facts": facts, "fixes": table, "not_tried_title": try_text.NOT_TRIED,
            "not_tried": [try_text.not_tried_line(f) for f in result.needs_edit], "lines": lines}
