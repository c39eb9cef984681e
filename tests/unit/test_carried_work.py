"""Work carried from the operator sample windows to every launch of the same kernel configuration.

The hand-made run: three iterations 100 µs apart, each a module ``Net.fc`` that runs two bf16
matrix products of different shapes on the same GEMM kernel configuration (2e9 and 1e9 FLOPs), then
an fp32 add outside every module (1e6 FLOPs, 12e6 bytes), then a step mark. Operators were
recorded in the first iteration only (one sample window). The third iteration also launches the
GEMM kernel outside every module, and a kernel never sampled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import duckdb
import pytest
from report_builder import ReportBuilder
from roofline_builder import CEILINGS, add_device, add_torch_op, install_torch_ops_contract

from gpuscope.analysis.ranges import op_windows
from gpuscope.analysis.roofline.work import carried_summary
from gpuscope.analysis.roofline.ceilings import save
from gpuscope.analysis.roofline.work.kernels import kernel_work
from gpuscope.analysis.roofline.points import kernel_points, roofline_sum, step_point
from gpuscope.analysis.ranges.operators import op_sum
from gpuscope.trace.report import Report

GEMM = "nvjet_sm90_tst_128x256_64x4_bz_TNT"
ADD = "vectorized_elementwise_kernel<add>"
BIG = ([[1000, 1000], [1000, 1000]], [[1000, 1000]])  # 2e9 FLOPs
HALF = ([[1000, 500], [500, 1000]], [[1000, 1000]])  # 1e9 FLOPs
PERIOD = 100_000


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    install_torch_ops_contract()
    save(CEILINGS)
    return tmp_path / "cache"


def build(path: Path, window: bool = True) -> ReportBuilder:
    """The run described above; ``window``: operators were sampled (a ``torch_op_window`` row)."""
    b = ReportBuilder(path)
    add_device(b)
    for i in range(3):
        t = i * PERIOD
        if i == 0:  # the sampled iteration: its operators were recorded
            add_torch_op(b, "aten::mm", t + 2_000, t + 3_000, BIG[0], ["bfloat16", "bfloat16"], BIG[1])
            add_torch_op(b, "aten::mm", t + 4_000, t + 5_000, HALF[0], ["bfloat16", "bfloat16"], HALF[1])
            add_torch_op(b, "aten::add", t + 10_000, t + 11_000, [[1000, 1000], [1000, 1000]],
                         ["float32", "float32"], [[1000, 1000]])
        b.range("Net.fc", t + 1_000, t + 9_000, 1, source="torch", category="forward")
        b.kernel(GEMM, t + 20_000, t + 60_000, tid=1, launch=t + 2_500)
        b.kernel(GEMM, t + 60_000, t + 80_000, tid=1, launch=t + 4_500)
        b.kernel(ADD, t + 80_000, t + 84_000, tid=1, launch=t + 10_500)
        b.mark("step", t + 95_000, 1)
    t = 2 * PERIOD
    b.kernel(GEMM, t + 86_000, t + 90_000, tid=1, launch=t + 12_000)  # outside every module
    b.kernel("mystery_kernel", t + 90_000, t + 92_000, tid=1, launch=t + 13_000)
    if window:
        b.writer.con.execute("INSERT INTO torch_op_window VALUES (?, 0, 50000, 3, 'end of step 0 to end of step 1')",
                             [b.pid])
    return b


@pytest.fixture
def sampled(tmp_path: Path, cache: Path) -> Iterator[Report]:
    with build(tmp_path / "sampled.gpuscope").open(trace=["cuda", "torch", "torch-shapes"]) as r:
        yield r


def test_every_launch_of_a_sampled_configuration_gets_its_work(sampled: Report) -> None:
    work = kernel_work(sampled).sort_values("start_ns")
    gemm = work[(work["name"] == GEMM) & (work["owner"] == "Net.fc")]
    # the first and second launch inside each Net.fc: the work of the first and second sampled ones
    assert list(gemm["flops"]) == [2e9 + 0, 1e9] * 3
    assert list(gemm["source"]) == ["model", "model"] + ["carried"] * 4
    assert set(gemm["tensor_cores"]) == {"used"} and set(gemm["precision"]) == {"bf16"}
    assert set(gemm["op_name"]) == {"aten::mm"} and gemm["torch_op_id"].isna().sum() == 4
    add = work[work["name"] == ADD]
    assert list(add["flops"]) == [1e6] * 3 and list(add["bytes"]) == [12e6] * 3
    # outside every module: only the configuration matches, and its sampled launches differ: their mean
    loose = work[(work["name"] == GEMM) & (work["owner"] != "Net.fc")].iloc[0]
    assert loose["flops"] == 1.5e9 and loose["source"] == "carried"
    assert work.loc[work["name"] == "mystery_kernel", "flops"].isna().all()  # never sampled


def test_the_summary_and_the_roofline_notes_say_what_was_carried(sampled: Report) -> None:
    c = carried_summary.summary(sampled)
    assert c is not None
    assert (c.windows, c.operators, c.outside, c.carried, c.mixed) == (1, 3, 8, 7, 1)
    assert c.kernel_ns == 3 * 64_000 + 6_000 and c.carried_ns == 2 * 64_000 + 4_000
    assert c.outside_ns - c.carried_ns == 2_000  # the mystery kernel
    note = carried_summary.note(sampled)
    assert note is not None and "1 sample window only" in note and "7 of them (66.7%)" in note
    assert "1 from sampled launches that differed" in note and "1.0% is in kernels whose configuration" in note
    assert note in roofline_sum(sampled).notes
    points = kernel_points(sampled)
    row = points[(points["name"] == GEMM) & (points["layer"] == "Net.fc")].iloc[0]
    assert row["kernels"] == 6 and row["flops"] == pytest.approx(9e9)
    assert row["bound"] == "compute"


def test_op_sum_says_its_operators_cover_the_windows_only(sampled: Report) -> None:
    notes = op_sum(sampled).notes
    assert any("recorded in 1 sample window only" in n for n in notes)


def test_a_report_without_windows_carries_nothing(tmp_path: Path, cache: Path) -> None:
    with build(tmp_path / "whole.gpuscope", window=False).open(trace=["cuda", "torch", "torch-ops"]) as r:
        work = kernel_work(r)
        assert work["flops"].notna().sum() == 3 and "carried" not in set(work["source"].dropna())
        assert carried_summary.summary(r) is None and carried_summary.note(r) is None


def test_a_version_4_report_without_the_window_table_still_reads(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "v4.gpuscope"
    build(path, window=False).open().close()
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE torch_op_window")
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [json.dumps(4)])
    con.close()
    with Report.open(path) as r:
        assert r.count("torch_op_window") == 0 and not op_windows.sampled(r)
        assert kernel_work(r)["flops"].notna().sum() == 3


def test_a_sampled_report_without_a_window_says_why_it_has_no_roofline(tmp_path: Path, cache: Path) -> None:
    b = ReportBuilder(tmp_path / "none.gpuscope")
    b.kernel(GEMM, 20_000, 60_000, tid=1, launch=2_500)
    with b.open(trace=["cuda", "torch", "torch-shapes"]) as r:
        (note,) = roofline_sum(r).notes
        assert "no window opened in this run" in note and "--trace torch-ops" in note
        assert "no sample window of --trace torch-shapes opened" in op_sum(r).notes[0]


def test_without_kernels_a_step_is_the_mean_of_the_steps_in_the_windows(tmp_path: Path, cache: Path) -> None:
    b = ReportBuilder(tmp_path / "cpu.gpuscope")
    for t in (12_000, 22_000):  # one matrix product in each of steps 2 and 3, the window's steps
        add_torch_op(b, "aten::mm", t, t + 1_000, BIG[0], ["float32", "float32"], BIG[1])
    for t in (10_000, 20_000, 30_000, 40_000, 50_000):
        b.mark("step", t, 1)
    b.writer.con.execute("INSERT INTO torch_op_window VALUES (?, 10000, 30000, 2, 'end of step 1 to end of step 3')",
                         [b.pid])
    with b.open(trace=["torch", "torch-shapes"]) as r:
        point, what = step_point(r)
        assert what == "one step (mean of 2 in the sample windows)"
        assert point is not None and point["flops"] == 2e9
