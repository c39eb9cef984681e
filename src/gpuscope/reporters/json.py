"""JSON output: ``{report_name: {"title", "notes", "rows": [{column: value}]}}``, raw units."""

from __future__ import annotations

import json as _json
from typing import Sequence

from ..analysis.table import Table
from ..units import machine, machine_label


def render(tables: Sequence[Table]) -> str:
    """Return the tables as one JSON object keyed by report name."""
    doc = {}
    for table in tables:
        labels = [machine_label(c.label, c.unit) for c in table.columns]
        rows = [
            {lab: machine(v, c.unit) for lab, v, c in zip(labels, row, table.columns)}
            for row in table.rows
        ]
        doc[table.name] = {"title": table.title, "notes": table.notes, "rows": rows}
    return _json.dumps(doc, indent=2) + "\n"
