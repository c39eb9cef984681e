"""The diagnosis as Markdown: the breakdown and steps as tables, the findings as a numbered list."""

from __future__ import annotations

from ..analysis.diagnosis import Diagnosis
from ..analysis.table import Table
from .findings_table import saving_text, skipped_lines
from ..units import human


def _table(table: Table) -> str:
    cells = [[human(v, c.unit).replace("|", "\\|") for v, c in zip(row, table.columns)] for row in table.rows]
    align = ["---:" if c.unit != "text" else "---" for c in table.columns]
    out = ["| " + " | ".join(c.label for c in table.columns) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in cells]
    out += ["", *(f"_{n}_  " for n in table.notes)]
    return "\n".join(out).rstrip() + "\n"


def render(diag: Diagnosis) -> str:
    """Return the diagnosis as Markdown."""
    out = ["## Step-time breakdown", "", _table(diag.breakdown_table())]
    if diag.processes:
        out += ["## Steps", "", _table(diag.steps_table())]
    out += ["## Findings, ranked by estimated saving", ""]
    for i, f in enumerate(diag.findings, 1):
        out.append(f"{i}. **{f.title}** (`{f.rule}`): saves {saving_text(f)}"
                   + (" (expected cost)" if f.advisory else ""))
        out += [f"   - {e}" for e in f.evidence]
        out.append(f"   - where: `{f.location}`")
        out.append(f"   - fix: {f.fix}")
    if not diag.findings:
        out.append("None above 1% of the step.")
    if diag.skipped:
        out += ["", "## Not checked", ""]
        out += [f"- `{rules}`: {reason}" for rules, reason in skipped_lines(diag)]
    return "\n".join(out) + "\n"
