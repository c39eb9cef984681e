"""nvtx_sum and nvtx_gpu_proj_sum on recorded reports (against pandas arithmetic) and on the
hand-made PyTorch run of tests/report_builder.py (against numbers worked out by hand)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from report_builder import ReportBuilder, torch_training

from gpuscope.analysis.ranges.summaries import nvtx_gpu_proj_sum, nvtx_sum
from gpuscope.trace.report import Report

STEPS = 4


def _row(table, **match) -> dict:
    rows = [r for r in table.records() if all(r[k] == v for k, v in match.items())]
    assert len(rows) == 1, f"{match} matches {len(rows)} rows"
    return rows[0]


def test_nvtx_sum_counts_and_statistics(mlp_api: Report) -> None:
    table = nvtx_sum(mlp_api)
    assert dict(zip(table.column("Range"), table.column("Instances"))) == {
        "step": STEPS, "forward": STEPS, "backward": STEPS, "optimizer": STEPS,
    }
    assert set(table.column("Source")) == {"nvtx"}
    r = mlp_api.ranges()
    for row in table.records():
        d = r.loc[r["name"] == row["Range"], "duration_ns"]
        assert (row["Total Time"], row["Min"], row["Max"]) == (d.sum(), d.min(), d.max())
        assert row["Avg"] == pytest.approx(d.mean()) and row["Med"] == pytest.approx(d.median())
        assert row["StdDev"] == pytest.approx(d.std(ddof=1))
    assert table.column("Range")[0] == "step"  # the longest in total: it encloses the others
    assert sum(table.column("Time")) == pytest.approx(100.0)


def test_nvtx_sum_names_domains_and_leaves_out_marks(recorded) -> None:
    with Report.open(recorded("nvtx_sources")) as report:
        ranges = nvtx_sum(report).column("Range")
    assert "pkg_domain:nvtx_push" in ranges  # the nvtx package, in a named domain
    assert "torch_push_outer" in ranges and "torch_mark" not in ranges


def test_nvtx_sum_counts_ranges_that_never_ended(tmp_path: Path) -> None:
    with torch_training(tmp_path / "t.gpuscope") as report:
        table = nvtx_sum(report)
    head = _row(table, Range="Net.head [forward]")
    assert (head["Instances"], head["Total Time"], head["Max"], head["StdDev"]) == (2, 2000, 2000, 0)
    assert _row(table, Range="Net [forward]")["Instances"] == 2
    assert table.notes == ["1 range(s) never ended: counted in Instances, left out of the times."]


def _projection(report: Report, same_thread: bool = True) -> pd.DataFrame:
    """Per range instance, from the operations whose launch it encloses: independent of the SQL."""
    from gpuscope.analysis.ops.attribution import op_ranges

    pairs = op_ranges(report, same_thread=same_thread).dropna(subset=["range_name"])
    return pairs.groupby(["range_name", "range_start_ns"]).agg(
        proj=("end_ns", "max"), first=("start_ns", "min"), ops=("op_id", "count")
    ).assign(proj=lambda f: f["proj"] - f["first"])


def test_gpu_projection_of_the_recorded_steps(mlp_api: Report) -> None:
    table = nvtx_gpu_proj_sum(mlp_api)
    inst = _projection(mlp_api)
    for row in table.records():
        mine = inst.loc[row["Range"]]
        assert row["Range Instances"] == len(mine) == STEPS
        assert row["Total Proj Time"] == mine["proj"].sum() and row["Proj Max"] == mine["proj"].max()
        assert row["Proj Med"] == pytest.approx(mine["proj"].median())
        assert row["Total GPU Ops"] == mine["ops"].sum()
    step = _row(table, Range="step")
    # each step holds the 19 forward operations, the first backward kernel and the SGD update that
    # the main thread launched; forward, backward and optimizer are its children with GPU work
    assert (step["Total GPU Ops"], step["Avg GPU Ops"], step["Avg Range Lvl"], step["Avg Num Child"]) == (
        84, 21.0, 0.0, 3.0)
    assert _row(table, Range="forward")["Avg Range Lvl"] == 1.0
    r = mlp_api.ranges()
    assert step["Total Range Time"] == r.loc[r["name"] == "step", "duration_ns"].sum()
    assert table.column("Total Proj Time") == sorted(table.column("Total Proj Time"), reverse=True)
    assert table.notes == [
        (
            "GPU operations launched by threads that recorded no ranges (such as autograd's worker "
            "thread) are in no range of this table: 168."
        )
    ]


def test_gpu_projection_without_api_calls_counts_every_thread(recorded) -> None:
    with Report.open(recorded("mlp_default")) as report:
        table = nvtx_gpu_proj_sum(report)
        inst = _projection(report)
    # without API calls the autograd thread's backward kernels fall inside the "backward" ranges
    assert _row(table, Range="backward")["Total GPU Ops"] == inst.loc["backward", "ops"].sum() == 172
    assert _row(table, Range="step")["Avg GPU Ops"] == 63.0
    assert table.notes[0].startswith("No CUDA API calls in this report")


def test_gpu_projection_levels_children_and_open_ranges(tmp_path: Path) -> None:
    with torch_training(tmp_path / "t.gpuscope") as report:
        table = nvtx_gpu_proj_sum(report)
    net = _row(table, Range="Net [forward]")
    # first call: embed..gemm, GPU 10000-11000, children enc and head with GPU work; second: embed
    assert (net["Total Proj Time"], net["Total Range Time"], net["Range Instances"]) == (1100, 9000, 2)
    assert (net["Total GPU Ops"], net["Avg GPU Ops"], net["Avg Range Lvl"], net["Avg Num Child"]) == (
        5, 2.5, 0.0, 1.0)
    head = _row(table, Range="Net.head [forward]")
    # the second call never ended: it counts, encloses the later gemm, adds no range time, and
    # sits at the top level (no range encloses it)
    assert (head["Total Proj Time"], head["Total Range Time"], head["Range Instances"]) == (600, 2000, 2)
    assert head["Avg Range Lvl"] == 0.5
    bwd = _row(table, Range="Net [backward]")  # on autograd's thread: GPU 13000 to 14560
    assert (bwd["Total Proj Time"], bwd["Total GPU Ops"], bwd["Avg Num Child"]) == (1560, 4, 2.0)
    # the loss.backward() call launched nothing on its own thread
    assert "backward [autograd]" not in table.column("Range")


def test_reports_without_ranges_say_so(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "r.gpuscope")
    b.kernel("k", 0, 10, queued=0)
    with b.open(not_recorded={"nvtx": "NVTX ranges: add --trace nvtx"}) as report:
        for fn in (nvtx_sum, nvtx_gpu_proj_sum):
            table = fn(report)
            assert table.rows == [] and table.notes == ["No ranges in this report: NVTX ranges: add --trace nvtx."]


def test_ranges_without_gpu_work(tmp_path: Path) -> None:
    from gpuscope.analysis.ranges.summaries import REPORTS

    b = ReportBuilder(tmp_path / "r.gpuscope")
    b.range("Net", 0, 100, 1, category="forward")
    b.range("Net", 200, None, 1, category="forward")
    b.mark("step", 150, 1)
    with b.open() as report:
        tables = {name: fn(report) for name, fn in REPORTS.items()}
    assert tables["nvtx_sum"].rows[0][1:3] == (100, 2)
    assert tables["nvtx_gpu_proj_sum"].rows == []
    assert tables["nvtx_gpu_proj_sum"].notes[0] == "No GPU operation was launched inside a range."
    layer = tables["layer_sum"].records()
    # without GPU work the GPU columns are empty (not 0), and the text tables leave them out
    assert [(r["Name"], r["Calls"], r["GPU Self"], r["Share"]) for r in layer] == [("Net", 2, None, None)]
    first = tables["step_sum"].records()[0]
    assert (first["Step"], first["Start"], first["Duration"], first["GPU Busy"]) == ("1", 0, 150, None)


def test_command_line_prints_the_range_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from gpuscope.cli import main

    torch_training(tmp_path / "t.gpuscope").close()
    args = ["stats", str(tmp_path / "t.gpuscope"), "-f", "json"]
    assert main([*args, "-r", "layer_sum", "-r", "step_sum", "-r", "nvtx_gpu_proj_sum"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["layer_sum", "step_sum", "nvtx_gpu_proj_sum"]
    assert doc["layer_sum"]["rows"][0]["Name"] == "Net.enc.fc"
    assert [r["Step"] for r in doc["step_sum"]["rows"]] == ["1", "2", "mean", "median", "p95", "stddev"]
