"""Names are data: a report whose names carry terminal codes, newlines, HTML/JS, Markdown, spreadsheet
formulas and quotes goes through every output of stats, analyze, roofline, kernels and export, and
the end-of-run summary of profile: control characters are shown escaped, CSV formulas neutralized,
Markdown and HTML escaped, JSON stays JSON.

The reports are recorded fixtures whose strings (kernel, range, file and function names, the
recorded command) were rewritten to start with hostile text; operator names stay as they are so
the work models (and so the roofline points) still apply.
"""

from __future__ import annotations

import csv
import html.parser
import io
import json
import re
import sys
from pathlib import Path

import duckdb
import pytest
from markdown_it import MarkdownIt

from conftest import unpack_fixture

from .conftest import Gpuscope, base_env

# Each name starts with one of these (a spreadsheet formula start), then the rest.
STARTS = ["=HYPERLINK(\"http://x\")", "+1+1", "-2+3", "@SUM(1)", "\tTAB", "\rCR"]
REST = ("\x1b]0;pwned\x07\x1b[2J\x1b[31m\r\nforged line\n<script>alert(1)</script><img src=x onerror=alert(2)>"
        "[x](javascript:alert(3)) `code` ``two`` *em* _em_ |cell| \"dq\" 'sq' \u202eevil\x00\x7f\x9b")
# Characters that must never reach a terminal raw (newline ends our own lines and is allowed).
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _poison(path: Path) -> None:
    """Rewrite the report's names (not its operator names) to start with hostile text."""
    con = duckdb.connect(str(path))
    ids = {r[0] for r in con.execute(
        """SELECT name_id FROM kernel_config UNION SELECT mangled_id FROM kernel_config
           UNION SELECT name_id FROM nvtx_range UNION SELECT file_id FROM cpu_frame
           UNION SELECT function_id FROM cpu_frame""").fetchall()}
    ids.discard(0)
    for i, sid in enumerate(sorted(ids)):
        con.execute("UPDATE string SET value = ? || value WHERE id = ?", [STARTS[i % len(STARTS)] + REST, sid])
    con.execute("UPDATE meta SET value = ? WHERE key = 'command'", [json.dumps(["python", STARTS[0] + REST])])
    con.execute("UPDATE process SET argv = ?", [json.dumps(["python", STARTS[1] + REST])])
    con.execute("CHECKPOINT")
    con.close()


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name in ("gemm_conv", "cpu_balanced"):
        path = unpack_fixture(name, tmp_path_factory.mktemp(name))
        _poison(path)
        out[name] = path
    return out


def _terminal_safe(text: str, what: str) -> None:
    bad = RAW_CONTROL.findall(text)
    assert not bad, f"{what}: raw control characters {sorted(set(bad))!r} in:\n{text[:3000]}"


def _shown_escaped(text: str) -> bool:
    return "\\x1b]0;pwned\\x07" in text and "\\r\\nforged line" in text


def _csv_safe(text: str) -> None:
    cells = [c for row in csv.reader(io.StringIO(text)) for c in row]
    assert any("forged line" in c for c in cells), "no hostile name in the CSV"
    for cell in cells:
        if cell[:1] in ("=", "+", "-", "@", "\t", "\r"):
            float(cell)  # only a number may start so (a negative value)


def _markdown_safe(text: str) -> None:
    rendered = MarkdownIt("commonmark").enable("table").enable("strikethrough").render(text)
    assert "<script" not in rendered and "<img" not in rendered, rendered
    assert "javascript:" not in re.findall(r'href="([^"]*)"', rendered) and "<a " not in rendered, rendered
    assert "&lt;script&gt;" in rendered  # the name is shown, as text
    _terminal_safe(text, "markdown")


class _Elements(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [k for k, _ in attrs]


def _html_safe(text: str) -> None:
    parser = _Elements()
    parser.feed(text)
    assert "script" not in parser.tags and "img" not in parser.tags, parser.tags
    assert not [a for a in parser.attrs if a.startswith("on")]
    assert "&lt;script&gt;" in text


@pytest.mark.parametrize("name", ["gemm_conv", "cpu_balanced"])
@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_stats(gs: Gpuscope, reports: dict[str, Path], name: str, fmt: str) -> None:
    # wide enough that the hostile names are shown whole (narrower tables elide them, escaped first)
    res = gs.run("stats", str(reports[name]), "-f", fmt, env=base_env({"COLUMNS": "2000"}))
    assert res.returncode == 0, res.describe()
    _terminal_safe(res.stderr, "stderr")
    if fmt == "table":
        _terminal_safe(res.stdout, "stats table")
        assert _shown_escaped(res.stdout)
        assert not any(line.startswith("forged line") for line in res.stdout.splitlines())
    elif fmt == "csv":
        _csv_safe(res.stdout)
    else:
        doc = json.loads(res.stdout)
        _terminal_safe(res.stdout, "stats json")  # JSON escapes them as \u001b
        assert "forged line" in json.dumps(doc)


@pytest.mark.parametrize("name", ["gemm_conv", "cpu_balanced"])
@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
def test_analyze(gs: Gpuscope, reports: dict[str, Path], name: str, fmt: str) -> None:
    res = gs.run("analyze", str(reports[name]), "-f", fmt, "--min-share", "0")
    assert res.returncode == 0, res.describe()
    _terminal_safe(res.stderr, "stderr")
    if fmt == "table":
        _terminal_safe(res.stdout, "analyze table")
    elif fmt == "markdown":
        _markdown_safe(res.stdout)
    else:
        json.loads(res.stdout)
        _terminal_safe(res.stdout, "analyze json")


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_roofline_and_kernels(gs: Gpuscope, reports: dict[str, Path], fmt: str) -> None:
    res = gs.run("roofline", str(reports["gemm_conv"]), "-f", fmt, env=base_env({"COLUMNS": "2000"}))
    assert res.returncode == 0, res.describe()
    if fmt == "table":
        _terminal_safe(res.stdout, "roofline table")
        assert _shown_escaped(res.stdout)
    elif fmt == "csv":
        _csv_safe(res.stdout)
    else:
        json.loads(res.stdout)
    res = gs.run("kernels", str(reports["gemm_conv"]), "-f", fmt)
    _terminal_safe(res.stdout + res.stderr, "kernels")


def test_roofline_chart_html(gs: Gpuscope, reports: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "chart.html"
    res = gs.run("roofline", str(reports["gemm_conv"]), "-o", str(out))
    assert res.returncode == 0, res.describe()
    _html_safe(out.read_text())


def test_export_chrome(gs: Gpuscope, reports: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "x.trace.json"
    res = gs.run("export", str(reports["gemm_conv"]), "-o", str(out))
    assert res.returncode == 0, res.describe()
    doc = json.loads(out.read_text())
    names = [e.get("name", "") for e in (doc["traceEvents"] if isinstance(doc, dict) else doc)]
    assert any("forged line" in n for n in names)  # names are JSON strings, as they were recorded


def test_profile_summary_escapes_names(gs: Gpuscope) -> None:
    """Names the program gives (ranges, threads, a module's class) reach the end-of-run summary escaped."""
    gs.script("hostile.py", f"""
        import time, gpuscope
        NAME = {REST!r}
        for _ in range(3):
            with gpuscope.annotate(NAME):
                t = time.perf_counter()
                while time.perf_counter() - t < 0.05:
                    pass
        """)
    res = gs.profile("--trace", "cpu", "--stats", sys.executable, "hostile.py", env=base_env({"COLUMNS": "2000"}))
    assert res.returncode == 0, res.describe()
    _terminal_safe(res.stderr + res.stdout, "profile")
    assert "forged line" in res.stderr  # the name is shown (escaped), not dropped
