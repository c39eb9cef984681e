"""``gpuscope diff``: did the step time change between two sets of runs, by how much, with what
confidence, and where.

Step time: the median of the steady steps (warm-up left out) of each side, its change with a
bootstrap interval over steps (:mod:`.stats`); several reports per side pool their steps.
Per part of the step's breakdown (data loading, forward, backward, optimizer, other Python; on
GPUs GPU busy by bound class and GPU idle by cause), layer, program line (sampled Python), kernel
(by name and launch configuration) and operator: the mean time per step on each side, its change
and interval, from the same resampled steps. The step's change is attributed to them by their
share of the change of the mean step (a layer whose GPU time per step grew by 8 ms explains 80% of
a 10 ms slower step); the part whose change explains most is named as the main change. Host
synchronizations per step and the GPU memory peak are compared as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .data import FAMILIES, RunData
from .stats import MIN_STEPS, Change, compare, compare_many
from ...units import human

TOP = 40  # keys per family that get an interval (the largest on either side)
MIN_SHARE = 0.05  # a part explaining less of the step's change is not named in the attribution


@dataclass(frozen=True)
class Item:
    """One layer, kernel or operator: its change of GPU time per step, and its share of the change
    of the mean step (None when the step did not change)."""

    family: str
    key: str
    change: Change
    share: float | None

    @property
    def delta_ns(self) -> float:
        """New minus base, per step (ns)."""
        return self.change.new - self.change.base


@dataclass
class DiffResult:
    """The comparison of the ``base`` runs with the ``new`` runs."""

    base: list[RunData]
    new: list[RunData]
    step: Change
    step_mean_delta_ns: float
    spread: tuple[float, float]  # interquartile range of the step time per side (ns)
    items: dict[str, list[Item]] = field(default_factory=dict)
    syncs: Change | None = None
    sync_wait: Change | None = None
    sync_sites: list[tuple[str, float, float]] = field(default_factory=list)  # label, base, new per step
    memory: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def attribution(self) -> list[str]:
        """The change in a few phrases: the step, what explains it, the kernel that changed most,
        the synchronizations."""
        out = [f"step {_pct(self.step.change)} ({_ci(self.step)}): {self.step.verdict}"]
        for family, what in (("part", "main change"), ("line", "line")):
            item = self.main_change(family)
            if item is not None:
                c = item.change
                share = (f" ({item.share:.0%} of the step's change)" if item.share is not None and item.share > 0
                         else "")
                out.append(f"{what}: {item.key} {human(c.base, 'ns')} -> {human(c.new, 'ns')} per step{share}")
        if self.step.significant:
            for family in ("layer", "operator"):
                named = [i for i in self.items.get(family, []) if i.share is not None and i.share >= MIN_SHARE
                         and np.sign(i.delta_ns) == np.sign(self.step_mean_delta_ns)][:3]
                if named:
                    out.append("; ".join(f"{i.share:.0%} from {i.key}" for i in named))
                    break
        kernels = [i for i in self.items.get("kernel", []) if _changed(i.change)
                   and abs(i.delta_ns) >= MIN_SHARE * abs(self.step_mean_delta_ns)]
        if kernels:
            k = max(kernels, key=lambda i: abs(i.delta_ns))
            if not k.change.new:  # a ratio of 0x reads as nonsense: the kernel no longer runs
                out.append(f"kernel {_short(k.key)} gone ({human(k.change.base, 'ns')} per step before)")
            elif not k.change.base:
                out.append(f"kernel {_short(k.key)} new ({human(k.change.new, 'ns')} per step)")
            else:
                ratio = k.change.new / k.change.base
                out.append(f"kernel {_short(k.key)} {ratio:.2g}x {'slower' if ratio > 1 else 'faster'}")
        if self.syncs is not None and self.syncs.base != self.syncs.new:
            more = self.syncs.new - self.syncs.base
            where = ""
            if self.sync_sites:
                label, b, n = max(self.sync_sites, key=lambda s: abs(s[2] - s[1]))
                where = f" ({label})" if n != b else ""
            out.append(f"{abs(more):.3g} {'more' if more > 0 else 'fewer'} syncs per step{where}")
        return out

    def main_change(self, family: str) -> Item | None:
        """The item of ``family`` whose time per step changed most, where that change is significant
        and at least :data:`MIN_SHARE` of the mean step (of the longer side); None otherwise."""
        step = max(float(np.mean(np.concatenate([r.steps for r in side]))) if side else 0.0
                   for side in (self.base, self.new))
        changed = [i for i in self.items.get(family, []) if _changed(i.change)
                   and abs(i.delta_ns) >= MIN_SHARE * step]
        return max(changed, key=lambda i: abs(i.delta_ns)) if changed else None

    def gate(self, pct: float) -> tuple[bool, str]:
        """Whether the step is slower by more than ``pct`` percent beyond noise (the interval of the
        change lies above zero and the change exceeds ``pct``); returns (failed, reason in one line)."""
        s = self.step
        if not s.enough:
            return False, (f"too few steps to tell ({s.steps[0]} base, {s.steps[1]} new steady steps); "
                           "not failing")
        change = (s.change or 0) * 100
        if s.significant and change > pct:
            return True, (f"step time {change:+.1f}% ({_ci(s)}) is slower than the {pct:g}% allowed "
                          f"(median {s.base / 1e6:.3f} ms -> {s.new / 1e6:.3f} ms)")
        if change > pct:
            return False, (f"step time {change:+.1f}% ({_ci(s)}) is not significant: noise could explain it")
        return False, f"step time {change:+.1f}% ({_ci(s)}) is within {pct:g}%"


def _changed(c: Change) -> bool:
    """Whether a quantity changed beyond noise: its interval leaves out zero, or it appeared or
    vanished (no ratio to give an interval) in enough steps to tell."""
    if c.significant:
        return True
    return min(c.steps) >= MIN_STEPS and (c.base == 0) != (c.new == 0)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f}%"


def _ci(c: Change) -> str:
    if c.low is None or c.high is None:
        return "too few steps to tell"
    return f"CI {c.low * 100:+.1f}% to {c.high * 100:+.1f}%"


def _short(key: str, width: int = 60) -> str:
    return key if len(key) <= width else key[: width - 1] + "…"


def _family(base: list[RunData], new: list[RunData], family: str, step_delta: float) -> list[Item]:
    frames = [r.families[family] for r in [*base, *new] if family in r.families]
    if not frames:
        return []
    keys = sorted(set().union(*(f.columns for f in frames)))
    if not keys:
        return []

    def runs(side: list[RunData]) -> list[np.ndarray]:
        return [r.families.get(family, pd.DataFrame(index=range(len(r.steps)))).reindex(columns=keys, fill_value=0)
                .to_numpy(float) for r in side if len(r.steps)]

    rb, rn = runs(base), runs(new)
    mean_b = np.concatenate(rb).mean(axis=0) if rb else np.zeros(len(keys))
    mean_n = np.concatenate(rn).mean(axis=0) if rn else np.zeros(len(keys))
    top = np.argsort(-np.maximum(mean_b, mean_n))[:TOP]
    top = top[np.maximum(mean_b, mean_n)[top] > 0]
    changes = compare_many([r[:, top] for r in rb], [r[:, top] for r in rn], "mean")
    items = []
    for j, c in zip(top, changes):
        share = (c.new - c.base) / step_delta if step_delta else None
        items.append(Item(family, keys[j], c, share))
    return sorted(items, key=lambda i: -abs(i.delta_ns))


def diff(base: Sequence[RunData], new: Sequence[RunData]) -> DiffResult:
    """Return the comparison of the ``base`` runs with the ``new`` runs (each one or more reports)."""
    base, new = list(base), list(new)
    step = compare([r.steps for r in base], [r.steps for r in new], "median")
    pooled_b = np.concatenate([r.steps for r in base]) if base else np.zeros(0)
    pooled_n = np.concatenate([r.steps for r in new]) if new else np.zeros(0)
    delta = float(pooled_n.mean() - pooled_b.mean()) if len(pooled_b) and len(pooled_n) else 0.0
    result = DiffResult(base, new, step, delta, (_iqr(pooled_b), _iqr(pooled_n)), warnings=_warnings(base, new))
    for family in FAMILIES:
        items = _family(base, new, family, delta)
        if items:
            result.items[family] = items
    if any(r.syncs.sum() for r in [*base, *new]):
        result.syncs = compare_many([r.syncs[:, None] for r in base], [r.syncs[:, None] for r in new])[0]
        result.sync_wait = compare_many([r.sync_wait[:, None] for r in base],
                                        [r.sync_wait[:, None] for r in new])[0]
        labels = sorted(set().union(*(r.sync_sites for r in [*base, *new])))
        for label in labels:
            per = [float(np.concatenate([r.sync_sites.get(label, np.zeros(len(r.steps))) for r in side]).mean())
                   if side else 0.0 for side in (base, new)]
            result.sync_sites.append((label, per[0], per[1]))
    names = sorted(set().union(*(r.memory_peak for r in [*base, *new])))
    for name in names:
        peaks = [[r.memory_peak[name] for r in side if name in r.memory_peak] for side in (base, new)]
        result.memory[name] = (max(peaks[0]) if peaks[0] else None, max(peaks[1]) if peaks[1] else None)
    return result


def _iqr(values: np.ndarray) -> float:
    if not len(values):
        return 0.0
    q1, q3 = np.percentile(values, [25, 75])
    return float(q3 - q1)


def _warnings(base: list[RunData], new: list[RunData]) -> list[str]:
    """One line per mismatch between the runs: different programs or devices."""
    out = []
    for what, attr in (("programs", "program"), ("devices", "device")):
        seen = {getattr(r, attr) for r in [*base, *new] if getattr(r, attr)}
        if len(seen) > 1:
            out.append(f"the reports are of different {what} ({', '.join(sorted(seen))}); comparing what matches")
    return out
