"""The file of ``gpuscope report`` when one analysis runs past the memory a report's reader may use:
the page keeps every other section, says what it left out and which setting raises the limit,
and the command warns; a damaged report still fails as it does elsewhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

import gpuscope.analysis as analysis
import gpuscope.analysis.roofline.points as points
from gpuscope.analysis.timeline.tracks import build_index
from gpuscope.errors import ReadLimitError, ReportError
from gpuscope.reporters.html import file_page
from gpuscope.trace.report import Report
from gpuscope.trace.report_errors import explain


def _data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="gpuscope-data">(.*?)</script>', html, re.S)
    assert m is not None
    return json.loads(m.group(1))


def _out_of_memory(path: Path) -> ReportError:
    """The error a query past the memory limit raises (as Report.sql makes it)."""
    err = explain(path, duckdb.OutOfMemoryException("failed to pin block of size 256.0 KiB"), False)
    assert isinstance(err, ReadLimitError)  # a report error whose limit a setting raises
    return err


@pytest.fixture
def adam(tmp_path: Path) -> Path:
    from conftest import unpack_fixture

    return unpack_fixture("program_mlp_adam", tmp_path)


def test_a_section_past_the_memory_limit_is_left_out_and_said(adam: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reports = analysis.stats_reports()
    victim = "cuda_api_sum"

    def fails(report: Report) -> None:
        raise _out_of_memory(report.path)

    monkeypatch.setattr(points, "kernel_points", lambda report, ceilings=None: fails(report))
    monkeypatch.setattr(analysis, "stats_reports", lambda: {**reports, victim: fails})
    missing: list[str] = []
    with Report.open(adam) as report:
        data = _data(file_page(report, build_index(report), budget=1000, missing=missing))
    assert missing == ["the roofline", f"table {victim}"]
    content = data["content"]
    assert "GPUSCOPE_MEMORY_LIMIT higher" in content["roofline"]["left_out"] and content["roofline"]["kernels"] == []
    tables = {t["name"]: t for t in content["tables"]}
    assert list(tables) == list(reports)  # every table is there, the one left out with its reason
    assert tables[victim]["rows"] == [] and "GPUSCOPE_MEMORY_LIMIT" in tables[victim]["notes"][0]
    assert tables["cuda_gpu_kern_sum"]["rows"] and content["diagnosis"]["findings"]
    detail = content["run"]["detail"]
    assert len(detail) == 2 and "slices" in detail[0]  # the timeline's own line stays first (budget 1000)
    assert "the roofline" in detail[1] and f"table {victim}" in detail[1]


def test_a_damaged_report_is_not_taken_for_a_limit(adam: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def damaged(report: Report, ceilings: object = None) -> None:
        raise ReportError(report.path, "damaged: not a gpuscope report")

    monkeypatch.setattr(points, "kernel_points", damaged)
    with Report.open(adam) as report, pytest.raises(ReportError, match="damaged"):
        file_page(report, build_index(report))


def test_an_index_made_in_the_page_gives_the_same_page(adam: Path) -> None:
    """The timeline index given as the function that makes it (made in the page and dropped once its
    timeline is drawn, before the other sections are read) gives the page its own index gives."""
    with Report.open(adam) as report:
        given = file_page(report, build_index(report), budget=1000)
        made = file_page(report, lambda: build_index(report), budget=1000)
    assert _data(made) == _data(given)
    assert "Timeline:" in " ".join(_data(made)["content"]["run"].get("detail", []))  # the note of lanes left out
