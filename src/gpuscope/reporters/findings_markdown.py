"""The diagnosis as Markdown: the breakdown and steps as tables, the findings as a numbered list.

Every text that comes from the report (names inside titles, evidence, places) is escaped
(:mod:`..safe_text`), so a name never turns into a link, HTML, emphasis or a broken table.
"""

from __future__ import annotations

from ..analysis.diagnosis import Diagnosis
from ..analysis.table import Table
from ..safe_text import markdown as md
from ..safe_text import markdown_code as code
from .findings_table import none_above, saving_text, skipped_lines
from ..units import human


def _table(table: Table) -> str:
    cells = [[md(human(v, c.unit)) for v, c in zip(row, table.columns)] for row in table.rows]
    align = ["---:" if c.unit != "text" else "---" for c in table.columns]
    out = ["| " + " | ".join(md(c.label) for c in table.columns) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in cells]
    out += ["", *(f"_{md(n)}_  " for n in table.notes)]
    return "\n".join(out).rstrip() + "\n"


def render(diag: Diagnosis) -> str:
    """Return the diagnosis as Markdown."""
    out = ["## Step-time breakdown", "", _table(diag.breakdown_table())]
    host = diag.host_table()
    if host:
        out += ["## Host side of the steps", "", _table(host)]
    if diag.processes:
        out += ["## Steps", "", _table(diag.steps_table())]
    out += ["## Findings, ranked by estimated saving", ""]
    for i, f in enumerate(diag.findings, 1):
        out.append(f"{i}. **{md(f.title)}** ({code(f.rule)}): saves {saving_text(f)}"
                   + (" (expected cost)" if f.advisory else ""))
        out += [f"   - {md(e)}" for e in f.evidence]
        out.append(f"   - where: {code(f.location)}")
        out.append(f"   - fix: {md(f.fix)}")
    if not diag.findings:
        text = none_above(diag)
        out.append(md(text[0].upper() + text[1:] + "."))
    if diag.skipped:
        out += ["", "## Not checked", ""]
        out += [f"- {code(rules)}: {md(reason)}" for rules, reason in skipped_lines(diag)]
    return "\n".join(out) + "\n"
