"""A fix's measured gain over interleaved rounds: the median and a 95% t-interval of the per-round ratio.

Each round times the program as written and with the fix back to back, so the per-round ratio
``fixed / as written`` of their median steps cancels what drifts between rounds (the machine's load,
its clocks). The ratios are averaged on a log scale (a 2x speed-up and a 2x slow-down are equally
far from 1) and the interval is Student's t over the rounds, which stays honest for the few rounds a
try runs (with 3 rounds its half-width is 4.3 standard errors). The gain is ``1 - ratio``: the share
of the step the fix saves, the quantity the diagnosis estimates.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom 1-30; 1.96 past them.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError("a t-interval needs at least two rounds")
    return _T975[df - 1] if df <= len(_T975) else 1.96


@dataclass(frozen=True)
class Gain:
    """The share of the step a fix saved: the median over rounds and its 95% interval (None with one round)."""

    median: float
    low: float | None
    high: float | None
    rounds: int

    def excludes(self, value: float, tolerance: float) -> bool:
        """Whether ``value`` lies more than ``tolerance`` outside the interval (or off the one round's gain)."""
        low = self.low if self.low is not None else self.median
        high = self.high if self.high is not None else self.median
        return value < low - tolerance or value > high + tolerance

    @property
    def is_gain(self) -> bool:
        """Whether the fix made the step shorter: the whole interval above 0 (the gain, with one round)."""
        return (self.low if self.low is not None else self.median) > 0

    def as_dict(self) -> dict[str, float | int | None]:
        """Plain data, shares rounded to 0.1%."""
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 4)

        return {"median": r(self.median), "low": r(self.low), "high": r(self.high), "rounds": self.rounds}


def gain_from_ratios(ratios: Sequence[float]) -> Gain:
    """The gain of per-round ratios ``fixed / as written`` (each > 0)."""
    if not ratios:
        raise ValueError("no rounds to measure")
    if any(r <= 0 or not math.isfinite(r) for r in ratios):
        raise ValueError("step-time ratios must be positive")
    median = 1.0 - statistics.median(ratios)
    if len(ratios) < 2:
        return Gain(median, None, None, 1)
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    # a lower ratio is a larger gain: the interval's ends swap
    return Gain(median, 1.0 - math.exp(mean + half), 1.0 - math.exp(mean - half), len(ratios))
