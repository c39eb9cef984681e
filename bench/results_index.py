"""Write bench/RESULTS.md, the index of the benchmark results, from the files of bench/results/.

Each results file holds one benchmark. It starts with its title (``# ...``) and four marker lines:

    Measures: what the benchmark measures, in one line
    Headline: the current figure, copied from the newest entry (not recomputed)
    Device: the machine of that entry
    Date: the date of that entry, YYYY-MM-DD

then a paragraph saying how to re-run it, a ``## Current`` section holding the newest entry (whose
text must contain the date) and, where there are older entries, a ``## History`` section below it,
newest first.

    python bench/results_index.py            # rewrite bench/RESULTS.md
    python bench/results_index.py --check    # exit 1 if bench/RESULTS.md is not what would be written
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
INDEX = HERE / "RESULTS.md"
MARKERS = ("Measures", "Headline", "Device", "Date")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

HEADER = """# Benchmark and check results

Numbers as measured, with where and when. Re-run with the commands given; compare ratios only
within one run (these machines drift by up to 25% between runs).

Each benchmark has a file under [results/](results/): what it measures and the command that re-runs
it, its latest measurement under `## Current` and the older ones under `## History`, newest first.
This page is written from those files by `python bench/results_index.py`; edit the files, not this page.

To add a measurement to a benchmark's file:

1. Move the entry under `## Current` to the top of `## History` (add `## History` below `## Current`
   if the file has none).
2. Put the new entry under `## Current`: a `### ` heading with the device and date, then its table
   and notes, numbers as measured.
3. Copy its headline figure, device and date into the `Headline:`, `Device:` and `Date:` lines under
   the title (the date must appear in the new entry).
4. Run `python bench/results_index.py` and commit the file and this page together
   (`tests/unit/test_results_index.py` fails while they disagree).

A new benchmark gets a new file of the same shape: title, the four lines, a paragraph with the
command that re-runs it, `## Current`.

| benchmark | what it measures | current figure | device | date |
| --- | --- | --- | --- | --- |
"""


class ResultsFormatError(ValueError):
    """A results file that does not have the shape the index needs; the message names the file."""


@dataclass(frozen=True)
class ResultsFile:
    """What the index shows of one results file."""

    name: str
    title: str
    measures: str
    headline: str
    device: str
    date: str


def parse(path: Path) -> ResultsFile:
    """Return the title and marker lines of a results file; raise ResultsFormatError if its shape is wrong."""
    lines = path.read_text(encoding="utf-8").splitlines()
    where = f"{path.name}:"
    if not lines or not lines[0].startswith("# "):
        raise ResultsFormatError(f"{where} the first line is not a title ('# ...')")
    headings = [i for i, line in enumerate(lines) if line.startswith("## ")]
    current = [i for i in headings if lines[i].strip() == "## Current"]
    if len(current) != 1:
        raise ResultsFormatError(f"{where} needs exactly one '## Current' section, found {len(current)}")
    start = current[0]
    if headings[0] != start:
        raise ResultsFormatError(f"{where} '{lines[headings[0]]}' comes before '## Current'")
    found: dict[str, str] = {}
    for line in lines[1:start]:
        key, sep, value = line.partition(":")
        if sep and key in MARKERS:
            if key in found:
                raise ResultsFormatError(f"{where} two '{key}:' lines under the title")
            found[key] = value.strip()
    for key in MARKERS:
        if not found.get(key):
            raise ResultsFormatError(f"{where} no '{key}:' line under the title (before '## Current')")
    if not DATE.fullmatch(found["Date"]):
        raise ResultsFormatError(f"{where} 'Date:' is not YYYY-MM-DD: {found['Date']!r}")
    end = next((i for i in headings if i > start), len(lines))
    body = lines[start + 1:end]
    if end < len(lines) and lines[end].strip() != "## History":
        raise ResultsFormatError(f"{where} the section after '## Current' is '{lines[end]}', not '## History'")
    if not any(line.strip() for line in body):
        raise ResultsFormatError(f"{where} the '## Current' section is empty")
    if found["Date"] not in "\n".join(body):
        raise ResultsFormatError(f"{where} the date {found['Date']} of 'Date:' is not in the '## Current' entry")
    return ResultsFile(path.stem, lines[0][2:].strip(), found["Measures"], found["Headline"], found["Device"],
                       found["Date"])


def read_all(results_dir: Path = RESULTS_DIR) -> list[ResultsFile]:
    """Return every results file of the folder, parsed, in file-name order."""
    files = sorted(results_dir.glob("*.md"))
    if not files:
        raise ResultsFormatError(f"{results_dir}: no results files (*.md)")
    return [parse(path) for path in files]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(files: list[ResultsFile], results_link: str = "results") -> str:
    """Return the text of RESULTS.md: the header, then one table row per results file."""
    rows = [
        f"| [{f.name}]({results_link}/{f.name}.md) | {_cell(f.measures)} | {_cell(f.headline)} | "
        f"{_cell(f.device)} | {f.date} |"
        for f in files
    ]
    return HEADER + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the index (or, with --check, compare it); return the exit status."""
    parser = argparse.ArgumentParser(description="Write bench/RESULTS.md from the files of bench/results/.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the index is not what would be written")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help=argparse.SUPPRESS)
    parser.add_argument("--index", type=Path, default=INDEX, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        text = render(read_all(args.results_dir))
    except ResultsFormatError as exc:
        print(f"results_index: {exc}", file=sys.stderr)
        return 1
    old = args.index.read_text(encoding="utf-8") if args.index.exists() else None
    if args.check:
        if old != text:
            print(f"results_index: {args.index.name} is out of date: run python bench/results_index.py",
                  file=sys.stderr)
            return 1
        return 0
    if old != text:
        args.index.write_text(text, encoding="utf-8")
    print(f"results_index: wrote {args.index} ({text.count(chr(10)) - HEADER.count(chr(10))} benchmarks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
