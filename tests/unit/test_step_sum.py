"""step_sum on the recorded MLP (steps from its "step" ranges) and on hand-made step marks."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from report_builder import ReportBuilder, torch_training

from gpuscope.analysis.steps.table import step_sum
from gpuscope.trace.report import Report

SUMMARY = ["mean", "median", "p95", "stddev"]


def _steps(table) -> list[dict]:
    return [r for r in table.records() if r["Step"] not in SUMMARY]


def _summary(table) -> dict[str, dict]:
    return {r["Step"]: r for r in table.records() if r["Step"] in SUMMARY}


def _union(intervals: pd.DataFrame) -> int:
    total, end = 0, None
    for s, e in sorted(zip(intervals["start_ns"], intervals["end_ns"])):
        if end is None or s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total


def _check_recorded(report: Report, launch: pd.Series) -> list[dict]:
    """Compare step_sum with the step ranges and the kernels launched inside them (pandas)."""
    table = step_sum(report)
    assert table.notes[0] == "Steps: ranges named 'step' (no step marks were recorded)."
    r = report.ranges()
    ranges = r[r["name"] == "step"].sort_values("start_ns").reset_index(drop=True)
    steps = _steps(table)
    assert [s["Step"] for s in steps] == ["1", "2", "3", "4"]
    k = report.kernels().assign(launch=launch.values)
    inside = [k[(k["launch"] >= s) & (k["launch"] <= e)] for s, e in zip(ranges["start_ns"], ranges["end_ns"])]
    # a step lasts until its range ended and the GPU finished the kernels launched before that end
    ends = [max(e, k.loc[k["launch"] <= e, "end_ns"].max()) for e in ranges["end_ns"]]
    assert [s["Duration"] for s in steps] == [e - s for s, e in zip(ranges["start_ns"], ends)]
    assert all(s["Duration"] >= d for s, d in zip(steps, ranges["duration_ns"]))
    assert [s["Kernels"] for s in steps] == [len(x) for x in inside]
    # the sum of per-step kernels is every kernel launched inside a step range: all but two
    assert sum(s["Kernels"] for s in steps) == sum(len(x) for x in inside) == len(k) - 2 == 244
    return steps


def test_recorded_steps_with_api_calls(mlp_api: Report) -> None:
    k = mlp_api.kernels().merge(mlp_api.api_calls(), on=["pid", "correlation_id"], how="left",
                                suffixes=("", "_api"))
    steps = _check_recorded(mlp_api, k["start_ns_api"])
    # the first step (CUDA context, cuBLAS handles, first allocations) took 267 ms, the others 2-3 ms
    durations = [s["Duration"] for s in steps]
    assert durations[0] > 1.5 * pd.Series(durations).median() > max(durations[1:])
    assert [s["Warm-up"] for s in steps] == ["yes", "", "", ""]
    summary = _summary(step_sum(mlp_api))
    rest = pd.Series(durations[1:], dtype=float)
    assert summary["mean"]["Duration"] == pytest.approx(rest.mean())
    assert summary["median"]["Duration"] == pytest.approx(rest.median())
    assert summary["p95"]["Duration"] == pytest.approx(rest.quantile(0.95))
    assert summary["stddev"]["Duration"] == pytest.approx(rest.std(ddof=1))
    # GPU busy: the union of the intervals of the operations launched in the step, on any thread
    memops = pd.concat([mlp_api.memcpys(), mlp_api.memsets()]).merge(
        mlp_api.api_calls(), on=["pid", "correlation_id"], suffixes=("", "_api"))
    ops = pd.concat([k, memops])[["start_ns_api", "start_ns", "end_ns"]]
    r = mlp_api.ranges()
    second = r[r["name"] == "step"].sort_values("start_ns").iloc[1]
    mine = ops[(ops["start_ns_api"] >= second["start_ns"]) & (ops["start_ns_api"] <= second["end_ns"])]
    assert steps[1]["GPU Busy"] == _union(mine)
    assert steps[1]["Busy"] == pytest.approx(100 * _union(mine) / steps[1]["Duration"])


def test_recorded_steps_without_api_calls(recorded) -> None:
    with Report.open(recorded("mlp_default")) as report:
        steps = _check_recorded(report, report.kernels()["queued_ns"])
    assert [s["Warm-up"] for s in steps] == ["yes", "", "", ""]


def test_steps_between_marks(tmp_path: Path) -> None:
    with torch_training(tmp_path / "t.gpuscope") as report:
        table = step_sum(report)
    assert table.notes == ["Steps: PyTorch's marks at the end of optimizer.step()."]
    # step 1 from the first launch (500) to the first mark (23000), extended to 23200 where the GPU
    # finished the last kernel launched before that mark; step 2 from there to the second (40000);
    # in step 1 relu_bwd and accumulate overlap on the GPU by 20 ns
    assert [(s["Start"], s["Duration"], s["GPU Busy"], s["Kernels"], s["Warm-up"]) for s in _steps(table)] == [
        (500, 22700, 3290 - 20, 12, ""), (23200, 16800, 430, 3, "")]
    summary = _summary(table)
    assert summary["mean"]["Duration"] == summary["median"]["Duration"] == 19750
    assert summary["p95"]["Duration"] == pytest.approx(16800 + 0.95 * 5900)
    assert summary["stddev"]["Duration"] == pytest.approx(5900 / 2**0.5)
    assert summary["mean"]["Busy"] == pytest.approx((100 * 3270 / 22700 + 100 * 430 / 16800) / 2)
    assert summary["mean"]["Kernels"] is None


def _marked(path: Path, marks: list[int], source: str = "torch") -> ReportBuilder:
    b = ReportBuilder(path)
    b.kernel("first", 0, 1, tid=1, launch=0)
    for t in marks:
        b.mark("step", t, 1, source=source)
    return b


def test_gpuscope_step_marks_take_precedence(tmp_path: Path) -> None:
    b = _marked(tmp_path / "r.gpuscope", [100, 200, 300])
    b.mark("step", 250, 1, source="gpuscope")
    b.mark("step", 120, 1, source="nvtx", category=None)  # an NVTX mark named "step" is no boundary
    with b.open() as report:
        table = step_sum(report)
    assert [(s["Start"], s["Duration"]) for s in _steps(table)] == [(0, 250)]
    assert table.notes[0] == "Steps: gpuscope.step() marks."


@pytest.mark.parametrize(
    ("durations", "warm"),
    [
        ([100, 90, 10, 10, 11, 10, 12], 2),  # a leading run, each over 1.5x the median (11)
        ([10, 100, 10, 10], 0),  # a slow step later on is no warm-up
        ([16, 10, 11, 10], 1),  # 16 > 1.5 x 10.5
        ([15, 10, 10, 10], 0),  # not longer than 1.5x the median
        ([40, 40], 0),
    ],
)
def test_warmup_is_a_leading_run_of_long_steps(tmp_path: Path, durations: list[int], warm: int) -> None:
    marks = [sum(durations[: i + 1]) for i in range(len(durations))]
    with _marked(tmp_path / "r.gpuscope", marks).open() as report:
        table = step_sum(report)
    steps = _steps(table)
    assert [s["Duration"] for s in steps] == durations
    assert [s["Warm-up"] for s in steps] == ["yes"] * warm + [""] * (len(durations) - warm)
    assert _summary(table)["median"]["Duration"] == pd.Series(durations[warm:], dtype=float).median()


def test_no_steps(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "r.gpuscope")
    b.range("train", 0, 100, 1, source="nvtx")
    with b.open() as report:
        table = step_sum(report)
    assert table.rows == [] and "gpuscope.step()" in table.notes[0]
