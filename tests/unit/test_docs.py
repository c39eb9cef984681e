"""The README and docs/ as a newcomer reads them: a short README whose two commands are the ones CI
and a fresh machine run, links that lead somewhere, and every --trace value documented with what it
records and what it costs."""

from __future__ import annotations

import re
from pathlib import Path

from gpuscope.capture.collectors import TRACES

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
SETUP = "python3 -m venv .venv && .venv/bin/pip install -q -e "


def _slug(heading: str) -> str:
    """Return the anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def _table_rows(page: Path) -> set[str]:
    """Return the first cells' first words of the page's table rows that start with a code name."""
    lines = page.read_text().splitlines()
    return {line.split("|")[1].strip().split()[0].strip("`") for line in lines if line.startswith("| `")}


def test_the_readme_is_a_short_page_with_a_picture_of_each_output() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 150
    assert "![" in text and "docs/images/report.png" in text  # the HTML report
    assert "CPU step time" in text or "Step time" in text  # the end-of-run summary, as printed


def test_the_readmes_two_commands_are_the_ones_ci_and_a_new_user_run() -> None:
    commands = [line.strip() for line in README.read_text().splitlines() if line.strip().startswith(SETUP)]
    assert len(commands) == 2, commands
    main, tests = commands
    assert main.endswith("gpuscope profile --force-overwrite -o example examples/train.py")
    assert "--stats" not in main  # the main command shows the page, not every report
    assert (ROOT / "examples" / "train.py").is_file()
    assert tests in (ROOT / ".ci" / "run").read_text()  # CI runs the test command exactly as written


def test_every_relative_link_of_the_readme_and_docs_leads_to_a_file_and_heading() -> None:
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_every_trace_value_is_documented_with_what_it_records_and_costs() -> None:
    names = {t.name for t in TRACES}
    assert names <= _table_rows(ROOT / "docs" / "cli.md")
    assert names <= _table_rows(ROOT / "docs" / "costs.md")
    cli = (ROOT / "docs" / "cli.md").read_text()
    assert 'multiprocessing_context="spawn"' in cli and "fork" in cli


def test_the_design_notes_say_why_each_part_is_written_by_hand() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    for part in ("handoff.c", "timeline.js", "binary searches", "Chart.js", "msgspec"):
        assert part in design, part
    assert design.count("no library") + design.count("No library") + design.count("no charting library") >= 3
