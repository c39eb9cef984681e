"""Calibration stability: repeats give medians and spreads; the cache never trades a ceiling for a
lower or shakier one (unless told to), and says what it kept."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from gpuscope.analysis.roofline.calibration import calibration_table, combine, merge
from gpuscope.analysis.roofline.ceilings import Ceilings, load_cached, save
from gpuscope.run.roof_benchmark import Sizes, calibrate

DEVICE = "CPU Test Machine"


def _run(at: str, dram: float, fp32: float, spread: dict[str, float] | None = None) -> Ceilings:
    c = Ceilings(DEVICE, dram_bytes_per_s=dram, flops={"fp32": fp32}, measured_at=at,
                 sources={"dram": "measured", "fp32": "measured"})
    if spread:
        c.details["spread"] = dict(spread)
    return c


def test_repeats_give_the_median_and_the_spread() -> None:
    runs = [_run("t1", 100.0, 10.0), _run("t2", 104.0, 30.0), _run("t3", 102.0, 20.0)]
    c = combine(runs)
    assert c.flops["fp32"] == 20.0 and c.dram_bytes_per_s == 102.0
    assert c.details["spread"] == {"dram": pytest.approx(4 / 102), "fp32": pytest.approx(1.0)}
    assert c.details["samples"]["fp32"] == [10.0, 30.0, 20.0] and c.details["repeats"] == 3
    assert c.unstable() == {"fp32": pytest.approx(1.0)}  # DRAM's 3.9% is steady
    assert c.measured_at == "t3"


def test_a_lower_measurement_never_replaces_a_cached_one() -> None:
    """The issue's morning: FP32 at 193 GFLOP/s cached, then a busy machine measures 45, steadily."""
    cached = _run("morning", 3e9, 193e9, {"dram": 0.02, "fp32": 0.3})
    busy = _run("noon", 3.3e9, 45e9, {"dram": 0.01, "fp32": 0.02})
    kept, choices = merge(cached, busy)
    assert kept.flops["fp32"] == 193e9 and kept.details["spread"]["fp32"] == 0.3
    assert kept.dram_bytes_per_s == 3.3e9  # higher by more than 5%: this run's
    by = {c.key: c for c in choices}
    assert (by["fp32"].kept, by["dram"].kept) == ("cached", "run")
    assert "lower" in by["fp32"].why and "higher" in by["dram"].why
    assert kept.details["measured_at_by_key"] == {"dram": "noon", "fp32": "morning"}
    table = calibration_table(busy, choices)
    assert [r[5] for r in table.rows] == ["this run", "cached"]
    assert any("keeps its own FP32" in n and "--replace" in n for n in table.notes)


def test_close_values_go_to_the_steadier_measurement() -> None:
    cached = _run("then", 100.0, 100.0, {"dram": 0.02, "fp32": 0.2})
    now = _run("now", 98.0, 97.0, {"dram": 0.08, "fp32": 0.03})  # both within 5% of the cache
    kept, choices = merge(cached, now)
    assert (kept.dram_bytes_per_s, kept.flops["fp32"]) == (100.0, 97.0)
    assert [c.kept for c in choices] == ["cached", "run"]
    # a cache written before calibrations had spreads counts as the less steady
    kept, _ = merge(_run("old", 100.0, 100.0), now)
    assert (kept.dram_bytes_per_s, kept.flops["fp32"]) == (98.0, 97.0)


def test_replace_takes_this_run_and_unmeasured_ceilings_stay() -> None:
    cached = _run("then", 100.0, 100.0, {"fp32": 0.01})
    cached.l2_bytes_per_s, cached.sources["l2"] = 500.0, "measured"
    kept, choices = merge(cached, _run("now", 50.0, 60.0), force=True)
    assert (kept.dram_bytes_per_s, kept.flops["fp32"]) == (50.0, 60.0)
    assert kept.l2_bytes_per_s == 500.0  # this run did not measure L2
    assert {c.why for c in choices} == {"--replace"}
    kept, choices = merge(None, _run("first", 1.0, 2.0))
    assert {c.kept for c in choices} == {"run"} and kept.flops["fp32"] == 2.0


def test_cpu_calibration_repeats_its_benchmarks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path))
    c = calibrate("cpu", Sizes.tiny(), repeats=3)
    samples = c.details["samples"]
    assert set(samples) == {"dram", "fp32", "fp64"} and all(len(v) == 3 for v in samples.values())
    assert c.flops["fp32"] == statistics.median(samples["fp32"])
    assert c.details["spread"]["fp64"] == pytest.approx(
        (max(samples["fp64"]) - min(samples["fp64"])) / statistics.median(samples["fp64"]))
    save(c)
    assert load_cached(c.device) == c
    with pytest.raises(Exception, match="at least 1"):
        calibrate("cpu", Sizes.tiny(), repeats=0)


def test_an_unstable_calibration_is_named_wherever_its_ceilings_are_used() -> None:
    from gpuscope.analysis.roofline.ceilings import ceilings_table
    from gpuscope.analysis.roofline.points import ceilings_note

    shaky = _run("noon", 3e9, 45e9, {"dram": 0.02, "fp32": 0.42})
    assert "unstable when measured: FP32 varied 42% over the repeats" in ceilings_note(shaky)
    assert any(n.startswith("Unstable when measured (repeats spread by FP32 42%)") for n in ceilings_table(shaky).notes)
    steady = _run("noon", 3e9, 45e9, {"dram": 0.02, "fp32": 0.03})
    assert "unstable" not in ceilings_note(steady).lower()
    assert not [n for n in ceilings_table(steady).notes if "nstable" in n]
    table = calibration_table(shaky, merge(None, shaky)[1])
    assert any(n.startswith("Unstable machine") and "FP32 42%" in n for n in table.notes)
