"""sync_sum: host waits grouped by the program line that made them."""

from __future__ import annotations

from pathlib import Path

from gpuscope.analysis.ops.sync import is_library, sync_site_frame, sync_sum
from tests.report_builder import ReportBuilder, add_stack, add_sync_site

TORCH = "/usr/lib/python3.12/site-packages/torch/_tensor.py"


def _report(tmp_path: Path):
    b = ReportBuilder(tmp_path / "s.gpuscope")
    item_line = add_stack(b, [("train.py", 40, "<module>"), ("train.py", 12, "step")])
    nonzero_line = add_stack(b, [("train.py", 40, "<module>"), ("train.py", 15, "step")])
    printed = add_stack(b, [("train.py", 40, "<module>"), ("train.py", 20, "report"), (TORCH, 500, "__repr__")])
    for i in range(3):
        add_sync_site(b, 1000 * i, 1000 * i + 300, item_line)  # 3 x 300 ns
    add_sync_site(b, 5000, 5100, nonzero_line, api="cudaMemcpy")
    add_sync_site(b, 6000, 8000, printed, api="cudaDeviceSynchronize")
    return b.open()


def test_grouped_by_program_line_with_totals(tmp_path: Path) -> None:
    with _report(tmp_path) as r:
        t = sync_sum(r)
    rows = {rec["Location"]: rec for rec in t.records()}
    assert set(rows) == {"train.py:12", "train.py:15", "train.py:20"}
    assert rows["train.py:12"]["Calls"] == 3 and rows["train.py:12"]["Total Wait"] == 900
    assert rows["train.py:12"]["Max"] == 300 and rows["train.py:12"]["API"] == "cudaStreamSynchronize"
    assert rows["train.py:15"]["API"] == "cudaMemcpy"
    # a wait made inside a library is shown at the program line, with the library frame beside it
    assert rows["train.py:20"]["Function"] == "report"
    assert rows["train.py:20"]["Called From"].endswith(":500 __repr__")
    assert t.rows[0][7] == "train.py:20"  # the largest total first
    assert abs(sum(t.column("Time")) - 100.0) < 1e-9


def test_frame_has_one_row_per_call(tmp_path: Path) -> None:
    with _report(tmp_path) as r:
        f = sync_site_frame(r)
    assert len(f) == 5 and f["wait_ns"].sum() == 900 + 100 + 2000


def test_library_paths() -> None:
    assert is_library(TORCH) and is_library("/usr/lib/python3.11/threading.py") and is_library("<frozen runpy>")
    assert not is_library("/home/me/project/train.py")


def test_no_sites_says_why(tmp_path: Path) -> None:
    with ReportBuilder(tmp_path / "e.gpuscope").open() as r:
        t = sync_sum(r)
    assert t.rows == [] and t.notes and "synchroniz" in t.notes[0]
