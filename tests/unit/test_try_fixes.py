"""gpuscope try: the interval of the measured gain, the fix registry's mapping from findings to fixes,
and the comparison of the program's numbers."""

from __future__ import annotations

import math

import pytest

from gpuscope.analysis.diagnosis.finding import Finding
from gpuscope.errors import GpuscopeError
from gpuscope.experiment import fixes
from gpuscope.experiment.interval import gain_from_ratios, t975
from gpuscope.experiment.numerics import compare, tolerance


def finding(rule: str, share: float, **data: object) -> Finding:
    return Finding(rule, rule.replace("_", " "), share * 1e6, share, [], "train.py:12", "fix it", pid=1, data=dict(data))


def test_interval_of_identical_ratios_is_a_point() -> None:
    g = gain_from_ratios([0.5, 0.5, 0.5])
    assert g.median == pytest.approx(0.5)
    assert g.low == pytest.approx(0.5) and g.high == pytest.approx(0.5)
    assert g.is_gain


def test_interval_is_a_t_interval_on_log_ratios() -> None:
    ratios = [0.4, 0.5, 0.6]
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    g = gain_from_ratios(ratios)
    assert g.median == pytest.approx(0.5)
    assert g.low == pytest.approx(1 - math.exp(mean + 4.303 * sd / math.sqrt(3)))
    assert g.high == pytest.approx(1 - math.exp(mean - 4.303 * sd / math.sqrt(3)))
    assert g.low < 0.5 < g.high


def test_interval_judges_estimates_and_losses() -> None:
    g = gain_from_ratios([0.48, 0.5, 0.52])
    assert not g.excludes(0.5, 0.0)
    assert g.excludes(0.9, 0.1)  # far above the interval
    assert not g.excludes(0.62, 0.1)  # within the tolerance of its top
    slower = gain_from_ratios([1.1, 1.2, 1.15])
    assert not slower.is_gain and slower.median < 0
    one = gain_from_ratios([0.7])
    assert one.low is None and one.median == pytest.approx(0.3)
    assert t975(1) == pytest.approx(12.706) and t975(100) == pytest.approx(1.96)
    with pytest.raises(ValueError):
        gain_from_ratios([])
    with pytest.raises(ValueError):
        gain_from_ratios([0.0, 1.0])


@pytest.mark.parametrize(("rule", "expected"), [
    ("no_tensor_cores", {"tf32", "bf16_autocast"}),
    ("precision", {"tf32", "bf16_autocast"}),
    ("data_loader", {"dataloader_workers"}),
    ("pageable_copies", {"pin_memory"}),
    ("unfused_elementwise", {"compile"}),
    ("launch_bound", {"compile", "compile_reduce_overhead"}),
    ("channels_last", {"channels_last", "cudnn_benchmark"}),
    ("host_sync", set()),
    ("small_gemms", set()),
    ("hot_line", set()),
])
def test_rules_map_to_fixes(rule: str, expected: set[str]) -> None:
    assert {f.name for f in fixes.fixes_for(finding(rule, 0.2))} == expected


def test_expandable_segments_answers_fragmentation_only() -> None:
    assert [f.name for f in fixes.fixes_for(finding("out_of_memory", 0.0, fragmentation=True))] == ["expandable_segments"]
    assert fixes.fixes_for(finding("out_of_memory", 0.0, fragmentation=False)) == []


def test_plan_tries_fixes_of_the_top_findings_and_lists_edits() -> None:
    found = [finding("host_sync", 0.4), finding("data_loader", 0.3, workers=2), finding("launch_bound", 0.2),
             finding("unfused_elementwise", 0.1)]
    plan = fixes.plan(found, top=3)
    tried = {p.fix.name: p for p in plan.tried}
    assert set(tried) == {"dataloader_workers", "compile", "compile_reduce_overhead"}
    assert tried["dataloader_workers"].settings["num_workers"] == 2  # the finding's own count
    assert tried["compile"].estimate == pytest.approx(0.2)  # the best of the findings it answers in the top 3
    assert [f.rule for f in plan.needs_edit] == ["host_sync"]
    named = fixes.plan(found, top=1, named=["compile"])
    assert [p.fix.name for p in named.tried] == ["compile"] and named.tried[0].estimate == pytest.approx(0.2)
    with pytest.raises(GpuscopeError, match="unknown fix"):
        fixes.plan(found, top=1, named=["nope"])


def test_numerics_flag_numeric_fixes() -> None:
    assert fixes.BY_NAME["bf16_autocast"].changes_numerics and fixes.BY_NAME["tf32"].changes_numerics
    assert not fixes.BY_NAME["compile"].changes_numerics
    assert tolerance(["float32"], "bfloat16") == 5e-2 and tolerance(["float32"], None) == 1e-4


def test_compare_losses_outputs_and_noisy_programs() -> None:
    written = [{"losses": [1.0, 0.9, 0.8]}, {"losses": [1.0, 0.9, 0.8]}]
    same = compare({"losses": [1.0, 0.9, 0.8]}, written, None)
    assert same.what == "losses" and same.agrees and same.difference == 0
    off = compare({"losses": [1.0, 0.95, 0.8]}, written, None)
    assert off.agrees is False and off.difference == pytest.approx(0.05 / 0.9)
    assert compare({"losses": [1.0, 0.9001, 0.8]}, written, "bfloat16").agrees  # within bf16's tolerance
    noisy = compare({"losses": [1.0]}, [{"losses": [1.0]}, {"losses": [2.0]}], None)
    assert noisy.agrees is None and "own runs differ" in noisy.note
    out = [{"dtype": "float32", "shape": [2], "values": [1.0, 2.0]}]
    assert compare({"output": out}, [{"output": out}], None).agrees
    moved = [{"dtype": "float32", "shape": [2], "values": [1.0, 2.1]}]
    assert compare({"output": moved}, [{"output": out}], None).agrees is False
    assert compare({}, [{}], None).agrees is None
