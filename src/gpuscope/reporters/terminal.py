"""Tables for the terminal, in human units, laid out as plain fixed-width text.

A table fits the terminal's width (``COLUMNS``, else the terminal's, else 120 columns): numbers are
printed whole, long names are elided in the middle (``aten::...mm``) and, where that is not enough,
columns are left out in a stated order and named under the table (table_fit.py); csv and json carry
every column and the full names. Columns that hold nothing for the report at hand (every value
empty) are left out, and a table without rows is its title and notes. Plain formatting keeps a
1000-row kernel table at a few milliseconds (a layout engine that measures and wraps every cell
took over a second for the same table).
"""

from __future__ import annotations

import os
import shutil
import textwrap
from typing import Sequence

from ..analysis.table import Table
from ..safe_text import terminal as safe
from ..units import human
from .table_fit import GAP, fit

DEFAULT_WIDTH = 120  # output that goes to a pipe or a file, without COLUMNS
ELLIPSIS = "..."


def terminal_width() -> int:
    """Return the width to lay tables out in: ``COLUMNS``, the terminal's, or :data:`DEFAULT_WIDTH`."""
    try:
        env = int(os.environ.get("COLUMNS", ""))
        if env > 0:
            return max(env, 40)
    except ValueError:
        pass
    for fd in (1, 2):
        if os.isatty(fd):
            return max(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns, 40)
    return DEFAULT_WIDTH


def elide(text: str, width: int) -> str:
    """Return ``text`` shortened to ``width`` characters by cutting its middle (``aten::...mm``)."""
    if len(text) <= width:
        return text
    if width <= len(ELLIPSIS) + 2:
        return text[:width]
    keep = width - len(ELLIPSIS)
    head = (keep + 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (keep - head):]


def _empty(value: str) -> bool:
    return value in ("", "-")


def format_table(table: Table, width: int | None = None) -> str:
    """Return ``table`` as text no wider than ``width`` (default :func:`terminal_width`) where its
    numbers allow: a title line, a header, a rule, the rows, then its notes."""
    width = width or terminal_width()
    title = elide(safe(f"{table.title} ({table.name})"), width)
    notes = [_wrap(safe(note), width) for note in table.notes]
    if not table.rows:
        return "\n".join([title, *notes]) + "\n"
    cells = [[safe(human(v, c.unit)) for v, c in zip(row, table.columns)] for row in table.rows]
    keep = [i for i in range(len(table.columns)) if not all(_empty(r[i]) for r in cells)]
    columns = [table.columns[i] for i in keep]
    cells = [[r[i] for i in keep] for r in cells]
    labels = [safe(c.label) for c in columns]
    numeric = [c.unit != "text" for c in columns]
    wanted = [max([len(lab)] + [len(r[i]) for r in cells]) for i, lab in enumerate(labels)]
    layout = fit(table.name, [c.label for c in columns], wanted, numeric, width)
    widths = layout.widths
    labels = [labels[i] for i in layout.keep]
    cells = [[r[i] for i in layout.keep] for r in cells]
    numeric = [numeric[i] for i in layout.keep]
    if layout.dropped:
        notes.append(_wrap(f"Left out to fit {width} columns: {', '.join(layout.dropped)} (csv and json have "
                           "every column).", width))

    def line(values: Sequence[str]) -> str:
        parts = []
        for i, (v, w) in enumerate(zip(values, widths)):
            v = v if numeric[i] else elide(v, w)
            last = i == len(values) - 1
            parts.append(v.rjust(w) if numeric[i] else (v if last else v.ljust(w)))
        return (GAP + GAP.join(parts)).rstrip()

    out = [title, "", line(labels), GAP + GAP.join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    out += notes
    return "\n".join(out) + "\n"


def _wrap(text: str, width: int) -> str:
    """A note as lines of at most ``width`` characters, indented under its table; a word longer than a
    line (a path) is broken."""
    return textwrap.fill(text, width, initial_indent=GAP, subsequent_indent=GAP + "  ", break_on_hyphens=False)


def render(tables: Sequence[Table], width: int | None = None) -> str:
    """Return the tables as text, separated by blank lines."""
    return "\n".join(format_table(t, width) for t in tables)


def render_present(tables: Sequence[Table], width: int | None = None) -> str:
    """Return the tables that have rows, as :func:`render` does, then one paragraph naming the tables
    that have none (``gpuscope stats -r NAME`` prints one with the reason it is empty)."""
    width = width or terminal_width()
    present = [t for t in tables if t.rows]
    empty = [t.name for t in tables if not t.rows]
    text = render(present, width)
    if empty:
        line = (f"Nothing to show in this report for {', '.join(empty)} "
                f"(gpuscope stats -r NAME says why).")
        text += ("\n" if text else "") + textwrap.fill(line, width, break_on_hyphens=False) + "\n"
    return text
