"""The result of an analysis: a titled table whose columns know their units."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..units import Unit

# flops: operations; flops_per_s, bytes_per_s: rates; number: any other quantity (an intensity)


@dataclass(frozen=True)
class Column:
    """A column: its label, and the unit its raw values are in (ns, bytes, ...)."""

    label: str
    unit: Unit = "text"


@dataclass
class Table:
    """Rows of raw values (integer ns, bytes, counts); reporters choose how to show them."""

    name: str
    title: str
    columns: list[Column]
    rows: list[tuple[Any, ...]]
    notes: list[str] = field(default_factory=list)

    def column(self, label: str) -> list[Any]:
        """Return the values of the column labelled ``label``."""
        i = [c.label for c in self.columns].index(label)
        return [r[i] for r in self.rows]

    def records(self) -> list[dict[str, Any]]:
        """Return the rows as dicts keyed by column label."""
        labels = [c.label for c in self.columns]
        return [dict(zip(labels, r)) for r in self.rows]
