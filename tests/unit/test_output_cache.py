"""A large report's ``analyze`` and ``roofline`` output kept beside it: the same command again reads it
instead of deriving it, and anything that changes the output (the report, the options, the width,
the code) makes it derive again; small reports are never kept. And the memory-limit error suggests
a size above the one that ran out."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest

from gpuscope.cli import main
from gpuscope.reporters import output_cache
from gpuscope.trace.report_connection import larger_size
from gpuscope.trace.report_errors import explain


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_kept_output_is_used_only_for_the_same_report_options_and_width(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    report = tmp_path / "r.gpuscope"
    report.write_bytes(b"a report")
    opts = {"format": "table", "min_share": 1.0}
    assert output_cache.cached(report, "analyze", opts) is None
    where = output_cache.keep(report, "analyze", opts, "the output\nsecond line\n")
    assert where is not None and where.parent == tmp_path / "r.gpuscope.cache"
    assert output_cache.cached(report, "analyze", opts) == "the output\nsecond line\n"
    assert output_cache.cached(report, "analyze", {**opts, "min_share": 2.0}) is None
    assert output_cache.cached(report, "roofline", opts) is None
    monkeypatch.setenv("COLUMNS", "80")
    assert output_cache.cached(report, "analyze", opts) is None
    monkeypatch.setenv("COLUMNS", "100")
    st = report.stat()
    os.utime(report, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # the report changed
    assert output_cache.cached(report, "analyze", opts) is None


def test_a_kept_file_that_is_not_whole_is_ignored(tmp_path: Path) -> None:
    report = tmp_path / "r.gpuscope"
    report.write_bytes(b"a report")
    opts = {"format": "json"}
    where = output_cache.keep(report, "analyze", opts, "{}")
    assert where is not None
    where.write_bytes(where.read_bytes()[:20])  # cut inside its header
    assert output_cache.cached(report, "analyze", opts) is None
    where.write_bytes(b"\xff\xfe not text")
    assert output_cache.cached(report, "analyze", opts) is None
    where = output_cache.keep(report, "analyze", opts, "a name \x1b[2J that clears the screen\n")
    assert where is not None and output_cache.cached(report, "analyze", opts) is None  # never printed
    output_cache.keep(report, "analyze", opts, "a\tb\n")
    assert output_cache.cached(report, "analyze", opts) == "a\tb\n"


def test_analyze_and_roofline_of_a_large_report_answer_from_the_kept_output(recorded, capsys, monkeypatch) -> None:
    report = recorded("mlp_default")
    monkeypatch.setattr(output_cache, "MIN_OPERATIONS", 1)  # the fixture counts as large
    first = _run(capsys, "analyze", str(report))
    roof = _run(capsys, "roofline", str(report))
    assert "Step-Time Breakdown" in first and (report.parent / (report.name + ".cache")).is_dir()

    def derive(*_a, **_k):
        raise AssertionError("derived again")

    import gpuscope.analysis.diagnosis as diagnosis
    import gpuscope.analysis.roofline.points as roofline

    monkeypatch.setattr(diagnosis, "diagnose", derive)
    monkeypatch.setattr(roofline, "roofline_sum", derive)
    assert _run(capsys, "analyze", str(report)) == first
    assert _run(capsys, "roofline", str(report)) == roof
    assert main(["analyze", "--min-share", "2", str(report)]) != 0  # other options: derived again
    assert "derived again" in capsys.readouterr().err


def test_small_reports_are_not_kept(recorded, capsys) -> None:
    report = recorded("mlp_default")
    assert "Step-Time Breakdown" in _run(capsys, "analyze", str(report))
    assert not (report.parent / (report.name + ".cache")).exists()


@pytest.mark.parametrize(("limit", "bigger"), [("1GB", "4GB"), ("4GB", "16GB"), ("512MB", "2GB"), ("1.5GB", "6GB"),
                                               ("2GiB", "8GiB"), ("1KB", "1MB"), ("a lot", "4GB")])
def test_a_larger_size_is_four_times_the_limit(limit: str, bigger: str) -> None:
    assert larger_size(limit) == bigger


def test_out_of_memory_suggests_more_than_the_limit_that_failed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GPUSCOPE_MEMORY_LIMIT", "4GB")
    text = str(explain(tmp_path / "r.gpuscope", duckdb.OutOfMemoryException("could not allocate")))
    assert "memory allowed (4GB)" in text and "such as 16GB" in text and "such as 4GB" not in text
