"""The page of ``gpuscope view BASE NEW``: the two runs' timelines one above the other, aligned on
the same steps, and the comparison of ``gpuscope diff`` as tables.

The comparison comes from :func:`...analysis.diff.compare.diff` over :func:`...analysis.diff.data.run_data`
of each report, and its texts from :mod:`..diff` (the text report's), so the page computes no
number of its own. Tables use the cells of :func:`.content.table_data`: ``[raw value, text]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...analysis.diff.compare import DiffResult, Item
from ...analysis.timeline.tracks import TimelineIndex
from ...units import human
from ..diff import TITLES, _head, _row, _text, as_dict
from .page import render

_COLUMNS = [("Name", "text"), ("Base per step", "ns"), ("New per step", "ns"), ("Change", "percent"),
            ("95% interval", "text"), ("Significant", "text"), ("Share of the step's change", "percent")]


def _item_row(i: Item) -> list[list[Any]]:
    base, new, change, ci, share = _row(i)
    c = i.change
    return [[i.key, _text(i.key)], [c.base, base], [c.new, new],
            [None if c.change is None else 100 * c.change, change], [c.low, ci.rstrip("*")],
            ["yes" if c.significant else "no", "yes" if c.significant else "no"],
            [None if i.share is None else 100 * i.share, share]]


def diff_data(result: DiffResult) -> dict[str, Any]:
    """Return the comparison for the page: the step-time lines, the attribution, one table per
    family (step parts, layers, program lines, kernels, operators), synchronizations and memory
    peaks as lines, the warnings, and each side's run (``as_dict``'s ``base`` and ``new``, with
    its warm-up steps)."""
    plain = as_dict(result)
    tables = [{"name": f"diff_{family}", "title": TITLES[family], "notes": [],
               "columns": [{"label": label, "unit": unit} for label, unit in _COLUMNS],
               "rows": [_item_row(i) for i in items]} for family, items in result.items.items()]
    lines = []
    if result.syncs is not None and result.sync_wait is not None:
        lines.append(f"Host synchronizations per step: {result.syncs.base:.3g} -> {result.syncs.new:.3g}; host wait "
                     f"{human(result.sync_wait.base, 'ns')} -> {human(result.sync_wait.new, 'ns')}")
        for label, b, n in sorted(result.sync_sites, key=lambda s: -abs(s[2] - s[1]))[:5]:
            lines.append(f"{b:.3g} -> {n:.3g} per step: {_text(label)}")
    for name, (b, n) in result.memory.items():
        lines.append(f"Memory peak {name}: {human(b, 'bytes')} -> {human(n, 'bytes')}")
    return {"head": _head(result), "attribution": [_text(x) for x in result.attribution()],
            "step": plain["step_time"], "tables": tables, "lines": lines, "warnings": result.warnings,
            "sides": [plain["base"][0], plain["new"][0]]}


def diff_page(paths: list[Path], indexes: list[TimelineIndex]) -> str:
    """Return the page of ``gpuscope view BASE NEW``: both timelines (their windows asked for with
    ``side=0`` and ``side=1``) and the comparison from ``/api/diff``."""
    title = f"gpuscope: {paths[0].name} vs {paths[1].name}"
    data = {"mode": "diff", "title": title, "labels": [p.name for p in paths],
            "timelines": [ix.describe() for ix in indexes]}
    return render(data, title, template="diff.html", scripts=("format.js", "tables.js", "timeline.js", "diff.js"))
