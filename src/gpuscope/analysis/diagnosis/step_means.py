"""What a process's breakdown and its per-step arithmetic are on either side of a report: the steady
steps, their windows and mean, and a time over them said per step and as a share of the step. The
GPU side (:mod:`.breakdown`, :mod:`.context`) and the CPU side (:mod:`.cpu_breakdown`,
:mod:`.cpu_context`) differ in their parts, not in this."""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

import pandas as pd


class StepsBreakdown:
    """A process's breakdown: ``steps`` has one row per step (``step``, ``start_ns``,
    ``duration_ns``, ``warmup`` and one column per part)."""

    steps: pd.DataFrame

    @property
    def steady(self) -> pd.DataFrame:
        """The steps that are not set-up or warm-up (all of them when every step is)."""
        steady = self.steps[~self.steps["warmup"]]
        return steady if len(steady) else self.steps


class PerStep:
    """Per-step arithmetic of a process whose ``breakdown`` is a :class:`StepsBreakdown` with
    ``has_steps`` and ``mean_parts()``."""

    breakdown: Any
    WHOLE: ClassVar[str] = "the capture"  # what a report without steps counts as its one step

    @cached_property
    def steady_windows(self) -> pd.DataFrame:
        """The windows of the steady steps: ``step``, ``start_ns``, ``end_ns``."""
        s = self.breakdown.steady
        return pd.DataFrame({"step": s["step"], "start_ns": s["start_ns"],
                             "end_ns": s["start_ns"] + s["duration_ns"]}).reset_index(drop=True)

    @property
    def n_steps(self) -> int:
        """The number of steady steps (1 without steps)."""
        return max(len(self.steady_windows), 1) if self.breakdown.has_steps else 1

    @cached_property
    def step_ns(self) -> float:
        """The mean duration of a steady step (without steps, of the one window)."""
        return float(self.breakdown.mean_parts()["duration_ns"])

    @property
    def unit(self) -> str:
        """``per step``, or over the capture (the run) for a report without steps."""
        return "per step" if self.breakdown.has_steps else f"over {self.WHOLE}"

    def per_step(self, total_ns: float) -> float:
        """Return ``total_ns`` (over the steady steps) per step."""
        return total_ns / self.n_steps

    def share(self, per_step_ns: float) -> float:
        """Return a per-step time as a share of the step (0-1)."""
        return per_step_ns / self.step_ns if self.step_ns else 0.0
