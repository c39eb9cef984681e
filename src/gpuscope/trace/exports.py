"""The formats ``gpuscope export`` writes: one module each, registered in EXPORTS.

Listing them imports nothing: each format's module is imported when it is used, and has
``write(report, fh) -> int`` (the number of events or rows written to the text file ``fh``), or,
for a format whose output is a folder, ``write(report, folder) -> dict[str, int]`` (rows per
table; the folder appears whole or not at all).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from .report import Report


@dataclass(frozen=True)
class ExportFormat:
    """One output format of ``gpuscope export``."""

    name: str
    module: str  # the module of this package with its ``write``
    suffix: str  # replaces the report's suffix in the default output name
    help: str
    opens_in: str  # what to open the output with, for the closing line
    folder: bool = False  # the output is a folder that ``write`` creates, not a text file


EXPORTS = {
    "chrome": ExportFormat("chrome", "chrome", ".trace.json", "a trace for Perfetto UI or chrome://tracing",
                           "https://ui.perfetto.dev"),
    "parquet": ExportFormat("parquet", "parquet", ".parquet", "a folder with one Parquet file per table",
                            "DuckDB, pandas, Polars or Spark (columns in schema.json)", folder=True),
}


def writer(name: str) -> Callable[..., object]:
    """Return the ``write`` function of the export format ``name``."""
    return import_module(f"{__package__}.{EXPORTS[name].module}").write  # type: ignore[no-any-return]
