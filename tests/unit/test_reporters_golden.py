"""Every reporter over every report of ``gpuscope stats`` on the same recorded report, against golden
output kept beside the tests.

Set GPUSCOPE_UPDATE_GOLDEN=1 to rewrite the golden files after a deliberate change; review the diff.
"""

from __future__ import annotations

import csv
import io
import json
import os

import pytest

from conftest import GOLDEN
from gpuscope.analysis import stats_reports
from gpuscope.reporters import FORMATS
from gpuscope.reporters import terminal
from gpuscope.trace.report import Report

SUFFIX = {"table": "txt", "csv": "csv", "json": "json"}


def _render(fmt: str, report: Report) -> str:
    tables = [fn(report) for fn in stats_reports().values()]
    if fmt == "table":
        return terminal.render(tables)
    return FORMATS[fmt](tables)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_reporter_matches_golden(fmt: str, mlp_api: Report) -> None:
    text = _render(fmt, mlp_api)
    golden = GOLDEN / f"mlp_api.stats.{SUFFIX[fmt]}"
    if os.environ.get("GPUSCOPE_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_machine_formats_carry_integer_nanoseconds(mlp_api: Report) -> None:
    doc = json.loads(_render("json", mlp_api))
    row = doc["cuda_gpu_kern_sum"]["rows"][0]
    assert isinstance(row["Total Time (ns)"], int) and isinstance(row["Med (ns)"], int)
    assert row["Time (%)"] == round(row["Time (%)"], 1)
    blocks = _render("csv", mlp_api).split("\n\n")
    assert len(blocks) == len(stats_reports())
    first = list(csv.reader(io.StringIO(blocks[0])))
    assert first[0] == ["# cuda_gpu_kern_sum"]
    assert first[1][:3] == ["Time (%)", "Total Time (ns)", "Instances"]
    assert int(first[2][1]) == row["Total Time (ns)"]


def test_table_uses_human_units(mlp_api: Report) -> None:
    text = _render("table", mlp_api)
    assert "1.09 ms" in text  # the top GEMM's total time
    assert "35.7 MB" in text  # host-to-device bytes, decimal megabytes as nsys prints them


def test_golden_files_exist() -> None:
    for fmt in FORMATS:
        assert (GOLDEN / f"mlp_api.stats.{SUFFIX[fmt]}").exists()
