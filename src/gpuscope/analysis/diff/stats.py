"""Confidence intervals of a change between two sets of runs, by bootstrap over steps.

Each side is one or more runs, each a list of steps (warm-up left out). A resample draws, within
every run separately, as many steps as the run has, with replacement, and pools the runs of a side
(a stratified bootstrap: each run keeps its weight). The change is ``statistic(new) /
statistic(base) - 1``; the 95% interval is the 2.5th to 97.5th percentile of the resampled changes,
and a change is *significant* when that interval leaves out zero. With fewer than
:data:`MIN_STEPS` steps on a side the data cannot tell noise from change: no interval is given.

Steps of one run are treated as independent draws; variation from run to run (another node, a
different clock, a warmer cache) shows only when several runs per side are pooled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_STEPS = 5
RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 20261125  # fixed: the same reports give the same intervals


@dataclass(frozen=True)
class Change:
    """A change of one quantity: values per side (per step), the relative change and its interval
    (None when there are too few steps), and whether the interval leaves out zero."""

    base: float
    new: float
    change: float | None  # new / base - 1; None when base is 0
    low: float | None
    high: float | None
    steps: tuple[int, int]

    @property
    def enough(self) -> bool:
        """Whether each side has enough steps for an interval."""
        return self.low is not None

    @property
    def significant(self) -> bool:
        """Whether the interval leaves out zero (False without an interval)."""
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)

    @property
    def verdict(self) -> str:
        """``slower``/``faster`` (significant), ``no significant change`` or ``too few steps to tell``."""
        if not self.enough:
            return "too few steps to tell"
        if not self.significant:
            return "no significant change"
        return "slower" if (self.change or 0) > 0 else "faster"


def _resample_counts(rng: np.random.Generator, sizes: Sequence[int], n: int) -> np.ndarray:
    """How often each pooled step is drawn in each of ``n`` resamples (n x total), every run's
    steps drawn within that run."""
    return np.concatenate([rng.multinomial(size, np.full(size, 1.0 / size), size=n) for size in sizes], axis=1)


def _resampled(pooled: np.ndarray, counts: np.ndarray, statistic: str) -> np.ndarray:
    """The statistic of each resample (resamples x quantities)."""
    if statistic == "mean":
        return counts @ pooled / counts.sum(axis=1, keepdims=True)
    # median: expand the counts into the drawn values, one quantity at a time
    out = np.empty((len(counts), pooled.shape[1]))
    for j in range(pooled.shape[1]):
        values = np.repeat(np.broadcast_to(pooled[:, j], counts.shape).ravel(), counts.ravel())
        out[:, j] = np.median(values.reshape(len(counts), -1), axis=1)
    return out


STATISTICS = {"median": np.median, "mean": np.mean}


def compare(base: Sequence[np.ndarray], new: Sequence[np.ndarray], statistic: str = "median") -> Change:
    """Return the change of ``statistic`` of the per-step values from the ``base`` runs to the ``new``
    runs (each a sequence of per-run arrays), with its bootstrap interval."""
    return compare_many([np.asarray(r, dtype=float)[:, None] for r in base],
                        [np.asarray(r, dtype=float)[:, None] for r in new], statistic)[0]


def compare_many(base: Sequence[np.ndarray], new: Sequence[np.ndarray], statistic: str = "mean") -> list[Change]:
    """Like :func:`compare`, for many quantities at once: each run is a (steps x quantities) matrix;
    the same resampled steps serve every quantity (so their changes add up like the step's)."""
    fn = STATISTICS[statistic]
    sizes_b = [len(r) for r in base if len(r)]
    sizes_n = [len(r) for r in new if len(r)]
    width = next((r.shape[1] for r in [*base, *new] if r.ndim == 2), 0)
    pooled_b = np.concatenate([r for r in base if len(r)]) if sizes_b else np.zeros((0, width))
    pooled_n = np.concatenate([r for r in new if len(r)]) if sizes_n else np.zeros((0, width))
    point_b = fn(pooled_b, axis=0) if len(pooled_b) else np.zeros(width)
    point_n = fn(pooled_n, axis=0) if len(pooled_n) else np.zeros(width)
    steps = (len(pooled_b), len(pooled_n))
    enough = min(steps) >= MIN_STEPS
    low = high = None
    if enough:
        rng = np.random.default_rng(SEED)
        rb = _resampled(pooled_b, _resample_counts(rng, sizes_b, RESAMPLES), statistic)
        rn = _resampled(pooled_n, _resample_counts(rng, sizes_n, RESAMPLES), statistic)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = rn / rb - 1
        ratio = np.where(np.isfinite(ratio), ratio, np.nan)
        tail = (1 - CONFIDENCE) / 2
        finite = np.isfinite(ratio).any(axis=0)
        low, high = np.full(width, np.nan), np.full(width, np.nan)
        if finite.any():
            low[finite] = np.nanquantile(ratio[:, finite], tail, axis=0)
            high[finite] = np.nanquantile(ratio[:, finite], 1 - tail, axis=0)
    out = []
    for j in range(width):
        b, n = float(point_b[j]), float(point_n[j])
        change = n / b - 1 if b else None
        lo = float(low[j]) if low is not None and change is not None and np.isfinite(low[j]) else None
        hi = float(high[j]) if high is not None and change is not None and np.isfinite(high[j]) else None
        out.append(Change(b, n, change, lo, hi, steps))
    return out
