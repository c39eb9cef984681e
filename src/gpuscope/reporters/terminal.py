"""Tables for the terminal, drawn with rich, in human units."""

from __future__ import annotations

import io
import os
import sys
from typing import Sequence

from rich import box
from rich.console import Console
from rich.table import Table as RichTable

from ..analysis.table import Table
from .units import human

WIDE = 240


def console(file: object = None, width: int | None = None) -> Console:
    """Return a console: the terminal's width on a terminal, wide and plain when redirected."""
    target = file if file is not None else sys.stdout
    tty = hasattr(target, "isatty") and target.isatty()
    if width is None and not tty:
        width = int(os.environ.get("COLUMNS", WIDE))
    return Console(file=target, width=width, no_color=not tty, highlight=False, soft_wrap=False)  # type: ignore[arg-type]


def to_rich(table: Table) -> RichTable:
    """Return a rich table of ``table`` with numbers right-aligned in human units."""
    rt = RichTable(title=f"{table.title} ({table.name})", box=box.SIMPLE_HEAD, title_justify="left")
    for col in table.columns:
        numeric = col.unit != "text"
        rt.add_column(col.label, justify="right" if numeric else "left", no_wrap=numeric,
                      overflow="fold")
    for row in table.rows:
        rt.add_row(*(human(v, c.unit) for v, c in zip(row, table.columns)))
    return rt


def render(tables: Sequence[Table], width: int | None = None) -> str:
    """Return the tables drawn as text (no colour), each followed by its notes."""
    buf = io.StringIO()
    con = Console(file=buf, width=width or WIDE, no_color=True, highlight=False, color_system=None)
    for table in tables:
        con.print(to_rich(table))
        for note in table.notes:
            con.print(f"  {note}")
        con.print()
    return buf.getvalue()
