"""bench/RESULTS.md is the index that bench/results_index.py writes from bench/results/*.md: it may not
drift from the files, and every results file carries the headline and the Current section the index shows."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "results_index.py"
RESULTS = ROOT / "bench" / "results"

_spec = importlib.util.spec_from_file_location("results_index", SCRIPT)
assert _spec is not None and _spec.loader is not None
results_index = importlib.util.module_from_spec(_spec)
sys.modules["results_index"] = results_index
_spec.loader.exec_module(results_index)

GOOD = """# A benchmark (`bench/x.py`)

Measures: what x measures
Headline: 1.23x the step
Device: NVIDIA H100 80GB HBM3
Date: 2026-11-27

What it measures. Re-run: `python bench/x.py`.

## Current

### H100, 2026-11-27

| mode | ratio |
| --- | --- |
| default | 1.23 |

## History

### H100, 2026-11-25

| mode | ratio |
| --- | --- |
| default | 1.40 |
"""


def test_results_md_is_what_the_script_writes_from_the_results_files() -> None:
    expected = results_index.render(results_index.read_all(RESULTS))
    assert (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8") == expected, (
        "bench/RESULTS.md is out of date: run python bench/results_index.py"
    )


def test_every_results_file_has_its_headline_and_current_section() -> None:
    files = sorted(RESULTS.glob("*.md"))
    assert len(files) >= 20
    for path in files:
        parsed = results_index.parse(path)  # raises, naming the file, where a marker or Current is missing
        assert parsed.headline and parsed.device and parsed.measures, path.name
        text = path.read_text(encoding="utf-8")
        assert text.count("\n## Current\n") == 1, path.name


def test_the_index_has_one_row_per_file_linking_to_it() -> None:
    index = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    for path in RESULTS.glob("*.md"):
        assert index.count(f"](results/{path.name})") == 1, path.name
        assert (ROOT / "bench" / "results" / path.name).is_file()


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("Headline: 1.23x the step\n", "", "no 'Headline:' line"),
        ("Device: NVIDIA H100 80GB HBM3\n", "", "no 'Device:' line"),
        ("## Current\n", "## Latest\n", "exactly one '## Current'"),
        ("Date: 2026-11-27", "Date: 27 Nov", "not YYYY-MM-DD"),
        ("### H100, 2026-11-27", "### H100", "not in the '## Current' entry"),
        ("## History\n", "## Notes\n", "not '## History'"),
    ],
)
def test_a_results_file_without_its_headline_or_current_entry_is_refused(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    assert old in GOOD
    path = tmp_path / "x.md"
    path.write_text(GOOD.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(results_index.ResultsFormatError, match=message) as err:
        results_index.parse(path)
    assert str(err.value).startswith("x.md:")


def test_a_well_formed_file_becomes_one_row_with_its_headline_device_and_date(tmp_path: Path) -> None:
    (tmp_path / "x.md").write_text(GOOD.replace("1.23x the step", "1.23x | 1.40x"), encoding="utf-8")
    text = results_index.render(results_index.read_all(tmp_path))
    row = text.splitlines()[-1]
    assert row == ("| [x](results/x.md) | what x measures | 1.23x \\| 1.40x | NVIDIA H100 80GB HBM3 | "
                   "2026-11-27 |")


def test_the_script_rewrites_a_stale_index_and_check_fails_until_then(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "x.md").write_text(GOOD, encoding="utf-8")
    index = tmp_path / "RESULTS.md"
    index.write_text("old\n", encoding="utf-8")
    args = [sys.executable, str(SCRIPT), "--results-dir", str(results), "--index", str(index)]
    stale = subprocess.run([*args, "--check"], capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1 and "out of date" in stale.stderr and "Traceback" not in stale.stderr
    assert subprocess.run(args, capture_output=True, text=True, timeout=60).returncode == 0
    assert "| [x](results/x.md) |" in index.read_text(encoding="utf-8")
    assert subprocess.run([*args, "--check"], capture_output=True, text=True, timeout=60).returncode == 0
    (results / "x.md").write_text(GOOD.replace("Headline: 1.23x the step\n", ""), encoding="utf-8")
    broken = subprocess.run([*args, "--check"], capture_output=True, text=True, timeout=60)
    assert broken.returncode == 1 and broken.stderr.strip().count("\n") == 0
    assert "x.md: no 'Headline:' line" in broken.stderr and "Traceback" not in broken.stderr
