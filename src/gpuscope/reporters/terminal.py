"""Tables for the terminal, in human units, laid out as plain fixed-width text.

Names are printed whole on one line, as Nsight Systems prints them; numbers are right-aligned.
Plain formatting keeps a 1000-row kernel table at a few milliseconds (a layout engine that
measures and wraps every cell took over a second for the same table).
"""

from __future__ import annotations

from typing import Sequence

from ..analysis.table import Table
from ..safe_text import terminal as safe
from ..units import human

GAP = "  "


def format_table(table: Table) -> str:
    """Return ``table`` as text: a title line, a header, a rule, the rows, then its notes."""
    cells = [[safe(human(v, c.unit)) for v, c in zip(row, table.columns)] for row in table.rows]
    labels = [safe(c.label) for c in table.columns]
    widths = [max([len(lab)] + [len(r[i]) for r in cells]) for i, lab in enumerate(labels)]
    numeric = [c.unit != "text" for c in table.columns]

    def line(values: Sequence[str]) -> str:
        parts = []
        for i, (v, w) in enumerate(zip(values, widths)):
            last = i == len(values) - 1
            parts.append(v.rjust(w) if numeric[i] else (v if last else v.ljust(w)))
        return (GAP + GAP.join(parts)).rstrip()

    rule = [min(w, max(len(lab), 60)) if i == len(widths) - 1 else w for i, (w, lab) in enumerate(zip(widths, labels))]
    out = [safe(f"{table.title} ({table.name})"), "", line(labels), GAP + GAP.join("-" * w for w in rule)]
    out += [line(r) for r in cells]
    out += [f"{GAP}{safe(note)}" for note in table.notes]
    return "\n".join(out) + "\n"


def render(tables: Sequence[Table]) -> str:
    """Return the tables as text, separated by blank lines."""
    return "\n".join(format_table(t) for t in tables)
