"""``gpuscope import`` as a user runs it: a report that the other commands read, and one-line errors
(exit 2, nothing left behind) for files that are not traces of a known format."""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import pytest
from conftest import FIXTURES
from import_helpers import gpuscope_cli, shared

GPT_TRACE = FIXTURES / "gpt_eager.torch_trace.json.gz"


def _no_report_left(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if ".gpuscope" in p.name)


def _check_bad(d: Path, trace: Path, *expected: str) -> str:
    res = gpuscope_cli("import", str(trace), "-o", "out.gpuscope", cwd=d)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("gpuscope: error: "), res.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    assert _no_report_left(d) == []
    return lines[0]


def test_import_then_stats_and_export(tmp_path: Path) -> None:
    res = gpuscope_cli("import", str(GPT_TRACE), "-o", "gpt.gpuscope", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "wrote gpt.gpuscope (985 kernels" in res.stderr
    stats = gpuscope_cli("stats", "gpt.gpuscope", "-r", "step_sum", "-f", "csv", cwd=tmp_path)
    assert stats.returncode == 0, stats.stderr
    rows = [line.split(",") for line in stats.stdout.splitlines() if line.split(",")[1:2] and line.split(",")[1].isdigit()]
    assert len(rows) == 5
    again = gpuscope_cli("import", str(GPT_TRACE), "-o", "gpt.gpuscope", cwd=tmp_path)
    assert again.returncode == 2 and "exists" in again.stderr  # no silent overwrite


def test_default_output_name(tmp_path: Path) -> None:
    trace = tmp_path / "run.pt.trace.json.gz"
    trace.write_bytes(GPT_TRACE.read_bytes())
    res = gpuscope_cli("import", trace.name, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "run.gpuscope").is_file()


def test_output_name_gets_the_suffix_as_profile_does(tmp_path: Path) -> None:
    res = gpuscope_cli("import", str(GPT_TRACE), "-o", "run", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "wrote run.gpuscope (" in res.stderr and not (tmp_path / "run").exists()
    export = gpuscope_cli("export", "run.gpuscope", cwd=tmp_path)  # the next command a user types
    assert export.returncode == 0, export.stderr


def test_truncated_gzip_names_the_event(tmp_path: Path) -> None:
    data = GPT_TRACE.read_bytes()
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    line = _check_bad(tmp_path, bad, "truncated gzip", "after event ")
    number = int(line.rsplit("after event ", 1)[1].replace(",", "").split()[0])
    assert 1000 < number < 25_087  # somewhere in the middle of the trace's events


def test_truncated_json(tmp_path: Path) -> None:
    text = gzip.decompress(GPT_TRACE.read_bytes())
    bad = tmp_path / "cut.json"
    bad.write_bytes(text[: len(text) // 3])
    _check_bad(tmp_path, bad, "ends early or is damaged after event ")


def test_json_that_is_not_kineto(tmp_path: Path) -> None:
    bad = tmp_path / "other.json"
    bad.write_text('{"name": "x", "values": [1, 2, 3]}')
    _check_bad(tmp_path, bad, "not a PyTorch profiler trace", "without traceEvents")
    listed = shared("kineto/hta-memory_analysis--memory_timeline.raw.gz")  # export_memory_timeline's list
    _check_bad(tmp_path, listed, "not a PyTorch profiler trace", "JSON array")
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not JSON\n")
    _check_bad(tmp_path, text, "not JSON")


def test_chrome_trace_without_kineto_events(tmp_path: Path) -> None:
    bad = tmp_path / "chrome.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}')
    _check_bad(tmp_path, bad, "not a PyTorch profiler trace")


def test_trace_without_gpu_events(tmp_path: Path) -> None:
    # a CUPTI range-profiler trace: CUDA calls and operators, but no kernel, copy or set events
    trace = shared("kineto/hta-cupti_profiler--benchmark_result_924719_1679055439_trace.json.gz")
    _check_bad(tmp_path, trace, "no GPU events")


def test_sqlite_that_is_not_an_nsys_export(tmp_path: Path) -> None:
    bad = tmp_path / "other.sqlite"
    con = sqlite3.connect(bad)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.commit()
    con.close()
    _check_bad(tmp_path, bad, "not an Nsight Systems export")


@pytest.mark.parametrize("missing", ["nothing.json"])
def test_missing_file(tmp_path: Path, missing: str) -> None:
    _check_bad(tmp_path, tmp_path / missing, "no such trace file")


def test_analyze_and_roofline_of_imports_say_what_the_source_lacks(tmp_path: Path) -> None:
    """A trace without device properties: the roofline names no ceilings of this machine's CPU but
    says the trace has none; an nsys export has no operators; analyze works on both."""
    bert = shared("kineto/tracelens-h100--gaunernst_bert-small-uncased__1016001.json.gz")
    assert gpuscope_cli("import", str(bert), "-o", "bert.gpuscope", cwd=tmp_path).returncode == 0
    roof = gpuscope_cli("roofline", "bert.gpuscope", cwd=tmp_path)
    assert roof.returncode == 0, roof.stderr
    text = " ".join(roof.stdout.split())  # notes wrap at the terminal's width
    assert "Ceilings of CPU" not in text and "its trace has no device properties" in text
    assert "aten::addmm" in gpuscope_cli("stats", "bert.gpuscope", cwd=tmp_path).stdout
    nsys = shared("nsys/nsys-ai--healthy_1pct.sqlite")
    assert gpuscope_cli("import", str(nsys), "-o", "nsys.gpuscope", cwd=tmp_path).returncode == 0
    for report in ("bert.gpuscope", "nsys.gpuscope"):
        res = gpuscope_cli("analyze", report, cwd=tmp_path)
        assert res.returncode == 0 and "Step-Time Breakdown" in res.stdout, res.stderr
    roof = gpuscope_cli("roofline", "nsys.gpuscope", cwd=tmp_path)
    assert roof.returncode == 0 and "an Nsight Systems export has none" in " ".join(roof.stdout.split())
