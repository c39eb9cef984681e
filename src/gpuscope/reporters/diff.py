"""``gpuscope diff`` output: plain text for a terminal, JSON for tools, Markdown for a pull-request
comment. Names from the reports are shown as text only, through :mod:`gpuscope.safe_text`: control
characters (bidirectional controls included) escaped, and in Markdown its markup escaped too."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from ..analysis.diff.compare import DiffResult, Item
from ..analysis.diff.data import describe
from ..analysis.diff.stats import Change
from ..safe_text import markdown, terminal
from ..units import human
from .table_fit import GAP, fit
from .terminal import elide, terminal_width

ROWS = 10  # items per family in text and Markdown
TITLES = {"part": "Step parts (time per step)", "layer": "Layers (time per step)",
          "line": "Program lines (sampled time per step, main thread)", "kernel": "Kernels (by name and launch configuration)",
          "operator": "Operators (GPU time per step)"}


def _text(name: str) -> str:
    """Return ``name`` for a terminal (:func:`gpuscope.safe_text.terminal`)."""
    return terminal(name)


def _md(name: str) -> str:
    """Return ``name`` as inline Markdown that shows it literally (:func:`gpuscope.safe_text.markdown`)."""
    return markdown(name)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f}%"


def _change_text(c: Change) -> str:
    if c.base == 0:
        return "new"
    if c.new == 0:
        return "gone"
    return _pct(c.change)


def _ci(c: Change) -> str:
    if c.base == 0 or c.new == 0:
        return "-"
    if c.low is None or c.high is None:
        return "too few steps"
    return f"{c.low * 100:+.1f}% .. {c.high * 100:+.1f}%"


def _mark(c: Change) -> str:
    return "*" if c.significant else ""


def _row(i: Item) -> list[str]:
    c = i.change
    return [human(c.base, "ns"), human(c.new, "ns"), _change_text(c), _ci(c) + _mark(c),
            "" if i.share is None else f"{i.share:.0%}"]


def _head(result: DiffResult) -> list[str]:
    s = result.step
    nb, nn = len(result.base), len(result.new)
    return [
        f"Step time (median of steady steps): {human(s.base, 'ns')} -> {human(s.new, 'ns')}  "
        f"{_pct(s.change)}  (95% CI {_ci(s)}; {s.verdict})",
        f"  base: {s.steps[0]} steps from {nb} report{'s' * (nb != 1)}, spread (IQR) {human(result.spread[0], 'ns')}; "
        f"new: {s.steps[1]} steps from {nn} report{'s' * (nn != 1)}, spread (IQR) {human(result.spread[1], 'ns')}",
    ]


def render_text(result: DiffResult, width: int | None = None) -> str:
    """Return the comparison as text for a terminal of ``width`` columns (default: the terminal's,
    ``COLUMNS``): the tables fitted as the stats tables are (names elided, columns left out and
    named), every paragraph wrapped."""
    width = width or terminal_width()
    out = [*(_fill(line, width) for line in _head(result)), "",
           _fill("Attribution: " + "; ".join(_text(x) for x in result.attribution()), width), ""]
    dropped: set[str] = set()
    for family, items in result.items.items():
        out.append(elide(TITLES[family], width))
        out += _table(items[:ROWS], width, dropped)
        out.append("")
    if result.syncs is not None:
        out.append(_fill(f"Host synchronizations per step: {result.syncs.base:.3g} -> {result.syncs.new:.3g}; "
                         f"host wait {human(result.sync_wait.base, 'ns')} -> {human(result.sync_wait.new, 'ns')} "  # type: ignore[union-attr]
                         f"({_pct(result.sync_wait.change)}, CI {_ci(result.sync_wait)})", width))  # type: ignore[union-attr, arg-type]
        for label, b, n in sorted(result.sync_sites, key=lambda s: -abs(s[2] - s[1]))[:5]:
            out.append(_fill(f"  {b:.3g} -> {n:.3g} per step  {_text(label)}", width, "      "))
        out.append("")
    for name, (b, n) in result.memory.items():
        out.append(_fill(f"Memory peak {_text(name)}: {human(b, 'bytes')} -> {human(n, 'bytes')}", width))
    out.append(_fill("* significant: the 95% interval leaves out zero. Share: of the change of the mean step.", width))
    if dropped:
        left = [c for c in HEADER if c in dropped]
        out.append(_fill(f"Left out where a table did not fit {width} columns: {', '.join(left)} (--format json "
                         "has every column).", width))
    return "\n".join(out) + "\n"


HEADER = ["Base", "New", "Change", "95% CI", "Share", "Name"]


def _table(items: list[Item], width: int, dropped: set[str]) -> list[str]:
    """One family's rows as lines of at most ``width`` characters (table_fit's layout: the name
    elided, then columns left out; numbers never cut)."""
    rows = [[*_row(i), _short(_text(i.key), 120)] for i in items]  # escaped first: the cut counts what shows
    wanted = [max(len(r[k]) for r in [HEADER, *rows]) for k in range(len(HEADER))]
    numeric = [True] * 5 + [False]
    layout = fit("diff", HEADER, wanted, numeric, width)
    dropped.update(layout.dropped)
    lines = []
    for n, r in enumerate([HEADER, *rows]):
        cells = []
        for k, w in zip(layout.keep, layout.widths):
            if numeric[k]:
                cells.append(r[k].rjust(w))
            elif len(r[k]) <= w:
                cells.append(r[k])
            else:  # cut from the whole name, keeping a kernel's launch configuration
                cells.append(_short(_text(items[n - 1].key), w) if n else r[k][:w])
        lines.append((GAP + GAP.join(cells)).rstrip())
    return lines


def _fill(text: str, width: int, indent: str = "  ") -> str:
    """A paragraph as lines of at most ``width`` characters; a word longer than a line stays whole."""
    return textwrap.fill(text, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def render_markdown(result: DiffResult) -> str:
    """Return the comparison as Markdown (for a pull-request comment)."""
    s = result.step
    verdict = {"slower": "🔴 slower", "faster": "🟢 faster"}.get(s.verdict, s.verdict)
    out = ["## gpuscope diff", "", f"**Step time** (median): {human(s.base, 'ns')} → {human(s.new, 'ns')}, "
           f"**{_pct(s.change)}** (95% CI {_ci(s)}): {verdict}", "",
           f"Base: {s.steps[0]} steps, new: {s.steps[1]} steps (warm-up left out).", "",
           "**Attribution:** " + "; ".join(_md(x) for x in result.attribution()), ""]
    for family, items in result.items.items():
        out += [f"### {TITLES[family]}", "", "| Name | Base | New | Change | 95% CI | Share |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for i in items[:ROWS]:
            r = _row(i)
            out.append(f"| {_md(_short(i.key))} | {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} |")
        out.append("")
    if result.syncs is not None:
        out.append(f"Host synchronizations per step: {result.syncs.base:.3g} → {result.syncs.new:.3g}")
    for name, (b, n) in result.memory.items():
        out.append(f"Memory peak {_md(name)}: {human(b, 'bytes')} → {human(n, 'bytes')}  ")
    out.append("")
    out.append("_\\* significant: the 95% interval leaves out zero. Share: of the change of the mean step._")
    return "\n".join(out) + "\n"


def _short(key: str, width: int = 90) -> str:
    """``key`` cut to ``width`` characters, keeping a kernel's launch configuration at its end where
    there is room for it beside 20 characters of the name."""
    if len(key) <= width:
        return key
    name, sep, config = key.partition(" grid(")
    tail = sep + config if sep else ""
    if width - len(tail) >= 20:
        return name[: width - len(tail) - 1] + "…" + tail
    if sep and len(name) + 2 <= width:  # the name whole, the launch configuration cut
        return name + " …"
    return name[: width - 1] + "…"


def _change(c: Change | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"base": c.base, "new": c.new, "change": c.change, "ci_low": c.low, "ci_high": c.high,
            "significant": c.significant, "verdict": c.verdict, "steps": list(c.steps)}


def as_dict(result: DiffResult) -> dict[str, Any]:
    """The comparison as plain data (what the JSON output holds)."""
    return {
        "step_time": {**_change(result.step), "statistic": "median", "unit": "ns",  # type: ignore[dict-item]
                      "spread_iqr_ns": list(result.spread), "mean_delta_ns": result.step_mean_delta_ns},
        "attribution": result.attribution(),
        "base": [describe(r) for r in result.base],
        "new": [describe(r) for r in result.new],
        **{family: [{"name": i.key, "share_of_step_change": i.share, **_change(i.change)}  # type: ignore[dict-item]
                    for i in items] for family, items in result.items.items()},
        "syncs_per_step": _change(result.syncs),
        "sync_wait_per_step": _change(result.sync_wait),
        "sync_sites": [{"site": s, "base_per_step": b, "new_per_step": n} for s, b, n in result.sync_sites],
        "memory_peak_bytes": {k: {"base": b, "new": n} for k, (b, n) in result.memory.items()},
        "warnings": result.warnings,
    }


def render_json(result: DiffResult) -> str:
    """Return the comparison as JSON text."""
    return json.dumps(as_dict(result), indent=1) + "\n"


RENDERERS = {"text": render_text, "json": render_json, "markdown": render_markdown}
