"""Reporters: tables in, text out. One module per output format, registered in FORMATS (tables) or
DIAGNOSIS_FORMATS (a diagnosis)."""

from __future__ import annotations

from importlib import import_module
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


# The outputs of ``gpuscope analyze``, in order: named here so that the command line lists them
# without importing the diagnosis; each is the ``render`` of the module named.
DIAGNOSIS_FORMATS = {"table": "findings_table", "json": "findings_json", "markdown": "findings_markdown"}


def diagnosis_formats() -> dict[str, Callable[[Diagnosis], str]]:
    """The outputs of ``gpuscope analyze`` (a diagnosis in, text out), by format name."""
    return {name: import_module(f"{__package__}.{module}").render for name, module in DIAGNOSIS_FORMATS.items()}
