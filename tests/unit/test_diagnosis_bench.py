"""bench/diagnosis.py's comparison of measured fixes with the diagnosis's findings, on hand-made rows:
the best fix, per-sample gains of work-changing fixes and their ranking apart, the ±30% check,
programs with nothing to fix, and the bookkeeping of split runs.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from bench_module import load_bench

from gpuscope.analysis.diagnosis import Finding

cmp = load_bench("diagnosis_compare")
bench = load_bench("diagnosis")


def variant(rounds: list[float], rules: tuple[str, ...] = (), samples: int = 1, work_changing: bool = False,
            as_written: bool = False) -> dict[str, Any]:
    return {"as_written": as_written, "rules": list(rules), "samples_per_iteration": samples,
            "work_changing": work_changing, "round_s": rounds}


def finding(rule: str, share: float, advisory: bool = False, one_time: bool = False,
            work_changing: bool = False) -> dict[str, Any]:
    return {"rule": rule, "title": rule, "share": share, "saving_ns": 0, "advisory": advisory, "one_time": one_time,
            "work_changing": work_changing, "location": "", "evidence": []}


MLP = {
    "as_written": variant([1.0e-3, 1.1e-3, 0.9e-3], samples=32, as_written=True),
    "cuda_graph": variant([0.12e-3, 0.13e-3, 0.11e-3], ("launch_bound",), samples=32),
    "fused_adam": variant([0.88e-3, 0.968e-3, 0.792e-3], ("launch_bound",), samples=32),
    "batch_4x": variant([1.0e-3, 1.1e-3, 0.9e-3], ("gpu_memory",), samples=128, work_changing=True),
}


def test_gain_is_the_median_of_per_round_gains() -> None:
    gains = {f["name"]: f for f in cmp.fix_gains(MLP)}
    assert gains["cuda_graph"]["gain"] == pytest.approx(0.88)
    assert gains["cuda_graph"]["gain_min"] == pytest.approx(1 - 0.11 / 0.9)
    assert gains["cuda_graph"]["gain_max"] == pytest.approx(1 - 0.13 / 1.1)
    assert gains["fused_adam"]["gain"] == pytest.approx(0.12)
    assert gains["cuda_graph"]["as_written_median_s"] == pytest.approx(1.0e-3)


def test_a_work_changing_fix_is_compared_per_sample() -> None:
    gains = {f["name"]: f for f in cmp.fix_gains(MLP)}
    assert gains["batch_4x"]["gain"] == pytest.approx(0.75)  # same step time, 4x the samples


def test_best_fix_is_the_largest_gain_and_the_top_finding_must_name_it() -> None:
    found = [finding("launch_bound", 0.8), finding("hot_line", 0.05)]
    c = cmp.compare(MLP, found)
    assert c["best_fix"] == "cuda_graph" and c["top_rule"] == "launch_bound" and c["top_fix"] == "cuda_graph"
    assert c["estimate"] == pytest.approx(0.8) and c["within"] and c["pass"]
    c = cmp.compare(MLP, [finding("host_sync", 0.5), finding("launch_bound", 0.8)])
    assert not c["pass"] and c["rank"] == 2 and c["top_fix"] is None


def test_a_work_changing_fix_ranked_apart_is_not_the_best_fix() -> None:
    big = {**MLP, "batch_4x": variant([1.0e-3, 1.1e-3, 0.9e-3], ("gpu_memory",), samples=1024, work_changing=True)}
    apart = [finding("launch_bound", 0.8), finding("gpu_memory", 0.9, work_changing=True)]
    c = cmp.compare(big, apart)
    assert c["best_fix"] == "cuda_graph" and c["top_rule"] == "launch_bound" and c["pass"]
    batch = next(f for f in c["fixes"] if f["name"] == "batch_4x")
    assert batch["ranked_apart"] and batch["estimate"] == pytest.approx(0.9) and batch["within"]
    assert cmp.compare(big, [finding("launch_bound", 0.8)])["best_fix"] == "cuda_graph"  # no finding: apart
    # a diagnosis that ranks it with the others makes it a candidate, per sample
    together = [finding("gpu_memory", 0.9), finding("launch_bound", 0.8)]
    c = cmp.compare(big, together)
    assert c["best_fix"] == "batch_4x" and c["top_rule"] == "gpu_memory" and c["pass"]


def test_top_finding_skips_advisory_work_changing_and_one_time() -> None:
    found = [finding("warmup", 0.99, one_time=True), finding("warmup", 0.5, advisory=True),
             finding("gpu_memory", 0.6, work_changing=True), finding("launch_bound", 0.85)]
    assert cmp.compare(MLP, found)["top_rule"] == "launch_bound"
    assert cmp.compare(MLP, found, one_time=True)["top_rule"] == "warmup"


def test_estimate_adds_the_shares_of_every_rule_the_fix_names() -> None:
    v = {"as_written": variant([10e-3, 10e-3], as_written=True),
         "pinned": variant([5e-3, 5e-3], ("pageable_copies", "sync_copies", "stream_overlap"))}
    c = cmp.compare(v, [finding("pageable_copies", 0.3), finding("stream_overlap", 0.15), finding("launch_bound", 0.1)])
    assert c["estimate"] == pytest.approx(0.45) and c["within"] and c["pass"]
    assert c["fixes"][0]["matched_rules"] == ["pageable_copies", "stream_overlap"]


@pytest.mark.parametrize(("est", "measured", "ok"), [
    (0.5, 0.6, True), (0.42, 0.6, True), (0.78, 0.6, True), (0.79, 0.6, False), (0.3, 0.6, False),
    (0.02, 0.01, True), (0.2, 0.01, False), (0.0, -0.03, True), (None, 0.5, None),
])
def test_within_thirty_percent(est: float | None, measured: float, ok: bool | None) -> None:
    assert cmp.within(est, measured) is ok


def test_estimate_off_by_more_than_thirty_percent_fails() -> None:
    c = cmp.compare(MLP, [finding("launch_bound", 0.5)])
    assert c["top_rule"] == "launch_bound" and not c["within"] and not c["pass"]


def test_nothing_to_fix() -> None:
    v = {"as_written": variant([7e-3, 7.1e-3], as_written=True),
         "cuda_graph": variant([7e-3, 7.05e-3], ("launch_bound",))}
    quiet = [finding("warmup", 0.4, advisory=True), finding("launch_bound", 0.03),
             finding("gpu_memory", 0.2, work_changing=True)]
    c = cmp.compare(v, quiet, nothing_to_fix=True)
    assert c["expect_nothing"] and c["pass"] and c["over_5"] == []
    c = cmp.compare(v, [finding("host_sync", 0.08)], nothing_to_fix=True)
    assert c["expect_nothing"] and not c["pass"] and c["over_5"] == [{"rule": "host_sync", "share": 0.08}]
    c = cmp.compare({"as_written": v["as_written"]}, [], nothing_to_fix=True)  # no candidate at all
    assert c["expect_nothing"] and c["pass"]
    # a candidate that measured a real gain: judged as any other program
    gained = {**v, "cuda_graph": variant([5e-3, 5e-3], ("launch_bound",))}
    c = cmp.compare(gained, [finding("launch_bound", 0.28)], nothing_to_fix=True)
    assert not c["expect_nothing"] and c["pass"]


def test_work_changing_reads_the_finding_attribute_with_a_default() -> None:
    plain = Finding("launch_bound", "t", 1.0, 0.5, [], "here", "fix")
    assert cmp.work_changing(plain) is False
    assert cmp.work_changing(SimpleNamespace(rule="gpu_memory", work_changing=True)) is True
    row = cmp.finding_row(plain)
    assert row["rule"] == "launch_bound" and row["work_changing"] is False and row["share"] == 0.5


def test_markdown_has_a_line_per_program_and_per_fix() -> None:
    compared = cmp.compare(MLP, [finding("launch_bound", 0.8)])
    rows = [{"program": "mlp_adam", "description": "MLP", "comparison": compared},
            {"program": "missing", "description": "did not run"}]
    text = cmp.markdown(rows, "H100", "cuda")
    assert "| mlp_adam | MLP | `cuda_graph` 88%" in text and "| missing | did not run |" in text
    assert "`batch_4x` (per sample, apart)" in text


def test_split_runs_merge_and_balance() -> None:
    names = list(bench.PROGRAMS)
    halves = [bench.split(names, k, 2) for k in (1, 2)]
    assert sorted(halves[0] + halves[1]) == sorted(names) and not set(halves[0]) & set(halves[1])
    cost = [sum(bench.PROGRAMS[n] for n in h) for h in halves]
    assert abs(cost[0] - cost[1]) <= max(bench.PROGRAMS.values())
    old = [{"program": "bmm_loop", "v": 1}, {"program": "sync_item", "v": 1}]
    merged = bench.merge_rows(old, [{"program": "bmm_loop", "v": 2}, {"program": "mlp_adam", "v": 2}])
    assert [(r["program"], r["v"]) for r in merged] == [("sync_item", 1), ("mlp_adam", 2), ("bmm_loop", 2)]


def test_judge_without_a_report_fails_the_row() -> None:
    row = {"program": "bmm_loop", "nothing_to_fix": False,
           "variants": {"as_written": variant([1e-3], as_written=True), "bmm": variant([0.1e-3], ("small_gemms",))}}
    bench.judge(row, None)
    assert row["comparison"]["best_fix"] == "bmm" and not row["comparison"]["pass"]
