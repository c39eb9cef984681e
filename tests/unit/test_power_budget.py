"""The GPU's power budget in the diagnosis: a GPU at its power limit gains less than its idle gaps'
length when they are removed (the clocks drop to keep the same work within the same power)."""

from __future__ import annotations

from pathlib import Path

import pytest
from diagnosis_sim import Sim

from gpuscope.analysis.diagnosis import Diagnosis, diagnose
from gpuscope.analysis.roofline.power import PowerBudget

US = 1_000
MS = 1_000_000
GEMM = "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopB_TNT"
LOSS = ("train.py", 31, "<module>")


def _budget(mean_w: float, capped: float = 1.0) -> PowerBudget:
    return PowerBudget(device=0, limit_w=700.0, mean_w=mean_w, idle_w=115.0, capped_share=capped,
                       sm_clock_mhz=1710.0, max_sm_clock_mhz=1980.0)


def test_the_gain_under_the_limit() -> None:
    # at 693 W of 700 W: the 1% of headroom, plus the idle energy the gap no longer spends
    at_limit = _budget(693.0)
    step, gap = 11.0 * MS, 0.73 * MS
    assert at_limit.gain_ns(step, gap) == pytest.approx(step * 0.01 + gap * 115 / 700)
    assert at_limit.gain_ns(step, gap) / step == pytest.approx(0.0209, abs=0.0005)  # measured on an H100: 2%
    # far below the limit the whole gap is gained, and never more than it
    assert _budget(400.0, capped=0.0).gain_ns(step, gap) == gap
    assert _budget(600.0).gain_ns(step, 5 * MS) == pytest.approx(step * (1 - 600 / 700) + 5 * MS * 115 / 700)
    assert at_limit.gain_ns(step, 0.0) == 0.0
    # idle power above the mean (a mostly idle GPU): the mean bounds it
    assert PowerBudget(0, 700.0, 100.0, 150.0, 0.0, 0.0, 0.0).gain_ns(step, gap) == gap
    assert at_limit.limited and not _budget(400.0, capped=0.0).limited and _budget(400.0, capped=0.9).limited


def _item_loop(path: Path, watts: float | None, capped: bool = True) -> Diagnosis:
    """GPU-bound steps (10 ms of GEMM) with a loss read each step and 1 ms of host work after it."""
    sim = Sim(path)
    for _ in range(40):
        sim.kernel(GEMM, 10 * MS, launch_cost=10 * US)
        sim.item(LOSS)
        sim.cpu(1 * MS, at=LOSS)
        sim.step()
    if watts is not None:
        sim.power(watts, 700.0, capped, idle_watts=115.0)
    with sim.open() as report:
        return diagnose(report)


def _idle_share(diag: Diagnosis) -> float:
    return sum(f.share for f in diag.findings if f.rule in ("host_sync", "hot_line", "launch_bound"))


def test_a_gpu_at_its_power_limit_gains_little_from_its_gaps(tmp_path: Path) -> None:
    free = _idle_share(_item_loop(tmp_path / "free.gpuscope", None))
    cool = _idle_share(_item_loop(tmp_path / "cool.gpuscope", 400.0, capped=False))
    hot = _item_loop(tmp_path / "hot.gpuscope", 695.0)
    assert free == pytest.approx(cool) and free > 0.08  # no NVML limit, or far below it: the whole gap
    # at the limit: (0.7% headroom x 11 ms + 1 ms x 115/700) of an 11 ms step, about 2%
    assert _idle_share(hot) == pytest.approx((0.00714 * 11 + 115 / 700) / 11, abs=0.006)
    top = hot.findings[0]
    assert any("695 W of its 700 W limit" in e and "the clock drops" in e for e in top.evidence)


def test_old_reports_without_a_power_limit_get_no_model(tmp_path: Path) -> None:
    sim = Sim(tmp_path / "r.gpuscope")
    for _ in range(10):
        sim.kernel(GEMM, 10 * MS)
        sim.item(LOSS)
        sim.step()
    sim.memory(10**9)
    with sim.open() as report:
        from gpuscope.analysis.roofline.power import power_budget
        assert power_budget(report, 0, 0, 2**62) is None
