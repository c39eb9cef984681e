"""CSV output: one block per table, raw integer ns and bytes, units in the header; a text cell that a
spreadsheet would take for a formula is neutralized (:func:`..safe_text.csv_cell`)."""

from __future__ import annotations

import csv as _csv
import io
from typing import Sequence

from ..analysis.table import Table
from ..safe_text import csv_cell, terminal
from ..units import machine, machine_label


def render(tables: Sequence[Table]) -> str:
    """Return the tables as CSV; with several tables, each block starts with a ``# name`` line."""
    out = io.StringIO()
    for i, table in enumerate(tables):
        if len(tables) > 1:
            if i:
                out.write("\n")
            out.write(f"# {terminal(table.name)}\n")
        w = _csv.writer(out, lineterminator="\n")
        w.writerow([csv_cell(machine_label(c.label, c.unit)) for c in table.columns])
        for row in table.rows:
            w.writerow([csv_cell(machine(v, c.unit)) for v, c in zip(row, table.columns)])
    return out.getvalue()
