"""Reporters: tables in, text out. One module per output format, registered in FORMATS."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from ..analysis.table import Table
from . import csv, json, terminal

if TYPE_CHECKING:
    from ..analysis.diagnosis import Diagnosis

Render = Callable[[Sequence[Table]], str]

FORMATS: dict[str, Render] = {
    "table": terminal.render,
    "csv": csv.render,
    "json": json.render,
}


def diagnosis_formats() -> dict[str, Callable[[Diagnosis], str]]:
    """The outputs of ``gpuscope analyze`` (a diagnosis in, text out), by format name."""
    from . import findings_json, findings_markdown, findings_table

    return {"table": findings_table.render, "json": findings_json.render, "markdown": findings_markdown.render}
