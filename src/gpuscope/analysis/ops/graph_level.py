"""Which processes recorded their CUDA graphs whole, by gpuscope's choice (capture/cupti/graph_level.py)."""

from __future__ import annotations

import json
from typing import Any

from ...trace.report import Report


def graphs_recorded_whole(report: Report) -> dict[int, dict[str, Any]]:
    """Per process that switched to one record per graph launch, its ``graph-level`` collector row
    (``nodes``: of its first graph, ``from_ns``: when); rows that do not parse are left out."""
    out = {}
    for pid, detail in report.sql("SELECT pid, detail FROM collector WHERE name = 'graph-level'"):
        try:
            st = json.loads(detail or "{}")
        except ValueError:
            continue
        if isinstance(st, dict) and st.get("switched"):
            out[int(pid)] = st
    return out
