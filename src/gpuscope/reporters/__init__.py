"""Reporters: tables in, text out. One module per output format, registered in FORMATS."""

from __future__ import annotations

from typing import Callable, Sequence

from ..analysis.table import Table
from . import csv, json, terminal

Render = Callable[[Sequence[Table]], str]

FORMATS: dict[str, Render] = {
    "table": terminal.render,
    "csv": csv.render,
    "json": json.render,
}
