"""A GPU's power budget over the steady steps, and what removing idle time gains under it.

A GPU that runs at its power limit lowers its clocks to stay there. Its idle gaps (a host sync, launch
gaps, data loading) are then not only lost time: they are also when it spends little energy, which the
busy stretches use to run faster. Remove the gaps and the same work must fit the same power, so the
clocks drop and the step gains less than the gaps' length. On an H100 running bf16 GEMMs at 693 W of
its 700 W, dropping a ``.item()`` whose idle gap was ~5% of the step gained 2% (median of 20
interleaved rounds; the SM clock went from 1710 to 1695 MHz).

The model: over a step of length ``T`` at mean power ``P`` the work costs ``P T - P_idle g`` of energy,
where ``g`` is the idle time removed and ``P_idle`` the GPU's power while idle. Run at most at the
limit ``P_cap``, it takes at least ``(P T - P_idle g) / P_cap``, so the gain is
``min(g, max(0, T (1 - P / P_cap) + g P_idle / P_cap))``. Far below the limit this is all of ``g``.

Reads the NVML counters (``--trace nvml``): ``gpuN.power_watts``, ``gpuN.util_percent``,
``gpuN.power_limit_watts``, ``gpuN.power_capped`` and ``gpuN.sm_clock_mhz``. Reports without the
limit (written before it was recorded) get no power model.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...trace.report import Report

SETTLE_NS = 1_000_000_000  # NVML's power reading trails by about a second: samples this soon after the steps begin are left out
MIN_SAMPLES = 3


@dataclass(frozen=True)
class PowerBudget:
    """One GPU's power over a stretch of steps (watts), and its clock (MHz)."""

    device: int
    limit_w: float
    mean_w: float
    idle_w: float
    capped_share: float  # share of the samples whose clock-event reasons held the power cap
    sm_clock_mhz: float
    max_sm_clock_mhz: float

    @property
    def headroom(self) -> float:
        """The share of the limit the steps left unused (0 at the limit)."""
        return max(0.0, 1.0 - self.mean_w / self.limit_w) if self.limit_w > 0 else 1.0

    def gain_ns(self, step_ns: float, idle_ns: float) -> float:
        """What removing ``idle_ns`` of GPU idle time from a step of ``step_ns`` saves within the power
        budget (the module docstring's model); all of it when there is headroom enough."""
        if idle_ns <= 0 or step_ns <= 0 or self.limit_w <= 0:
            return max(0.0, idle_ns)
        gain = step_ns * self.headroom + idle_ns * min(self.idle_w, self.mean_w) / self.limit_w
        return min(idle_ns, max(0.0, gain))

    @property
    def limited(self) -> bool:
        """Whether the steps ran near the limit (within 5% of it, or the power cap held the clock
        in most samples)."""
        return self.headroom < 0.05 or self.capped_share >= 0.5

    def text(self) -> str:
        """One line on what the GPU drew against its limit."""
        clock = (f", SM clock {self.sm_clock_mhz:.0f} of {self.max_sm_clock_mhz:.0f} MHz"
                 if self.sm_clock_mhz and self.max_sm_clock_mhz else "")
        capped = f", the power cap holding the clock in {self.capped_share:.0%} of samples" if self.capped_share else ""
        return f"GPU {self.device} drew {self.mean_w:.0f} W of its {self.limit_w:.0f} W limit over the steps{clock}{capped}"


def power_budget(report: Report, device: int, start_ns: int, end_ns: int, max_clock_mhz: float = 0.0) -> PowerBudget | None:
    """The power budget of GPU ``device`` between ``start_ns`` and ``end_ns``; None where the report
    has no NVML power limit for it or too few samples in that stretch."""
    prefix = f"gpu{int(device)}."
    rows = report.sql(
        "SELECT ts_ns, name, value FROM host_counter WHERE name IN (?, ?, ?, ?, ?) ORDER BY ts_ns",
        [prefix + "power_watts", prefix + "util_percent", prefix + "power_limit_watts", prefix + "power_capped",
         prefix + "sm_clock_mhz"])
    series: dict[str, list[tuple[int, float]]] = {}
    for ts, name, value in rows:
        series.setdefault(name[len(prefix):], []).append((int(ts), float(value)))
    limits = [v for _, v in series.get("power_limit_watts", []) if v > 0]
    if not limits:
        return None
    settle = start_ns + SETTLE_NS if end_ns - start_ns > 2 * SETTLE_NS else start_ns

    def within(name: str, lo: int) -> list[float]:
        return [v for t, v in series.get(name, []) if lo <= t <= end_ns]

    power = within("power_watts", settle)
    if len(power) < MIN_SAMPLES:
        return None
    util = dict(series.get("util_percent", []))
    idle = [v for t, v in series.get("power_watts", []) if util.get(t) == 0.0]
    capped = within("power_capped", start_ns)
    clocks = sorted(within("sm_clock_mhz", start_ns))
    return PowerBudget(
        device=int(device), limit_w=max(limits), mean_w=sum(power) / len(power),
        idle_w=_median(idle) if idle else min(v for _, v in series["power_watts"]),
        capped_share=sum(1 for v in capped if v > 0) / len(capped) if capped else 0.0,
        sm_clock_mhz=_median(clocks) if clocks else 0.0, max_sm_clock_mhz=max_clock_mhz)


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
