"""The steps that have PyTorch module ranges, where the capture recorded them in some steps only.

By default the capture records module ranges in the first steps and then in one step of every few
(capture/python/module_steps.py): the layer tables then read the operations of those steps only, so
that the operations of the other steps do not pile up outside every module. The ``ranges``
collector row of each process says how many steps ended and how many of them had module ranges.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from ...trace.report import Report
from ..ops.attribution import ranges_table, temp_table
from ..steps.source import StepSource, op_steps_table, steps_table

RANGED_OPS = "gpuscope_ranged_op"
RANGED_STEPS = "gpuscope_ranged_step"


@dataclass(frozen=True)
class ModuleSteps:
    """Steps ended, and those of them with module ranges, summed over the report's processes."""

    steps: int
    recorded: int
    first: int
    every: int

    @property
    def sampled(self) -> bool:
        return 0 < self.recorded < self.steps

    def describe(self) -> str:
        return (f"module ranges were recorded in {self.recorded} of {self.steps} steps (the first {self.first}, "
                f"then one in {self.every}; GPUSCOPE_MODULE_STEPS=all records every step)")


def module_steps(report: Report) -> ModuleSteps | None:
    """What the report's processes said of their steps with module ranges; None where none said."""
    if not report.count("collector"):
        return None
    steps = recorded = first = every = 0
    said = False
    for (detail,) in report.sql("SELECT detail FROM collector WHERE name = 'ranges'"):
        try:
            counts = json.loads(detail or "{}")
            n, r = int(counts["module_steps"]), int(counts["module_steps_recorded"])
            f, e = int(counts.get("module_steps_first", 0)), int(counts.get("module_steps_every", 1))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        said = True
        steps, recorded, first, every = steps + n, recorded + r, max(first, f), max(every, e)
    return ModuleSteps(steps, recorded, first, every) if said else None


def _ranged_steps(report: Report, source: StepSource) -> str | None:
    """The table ``(pid, step)`` of the steps that have a module range, where module ranges were
    sampled and steps are known; None where every step has them."""
    said = module_steps(report)
    if source.kind is None or said is None or not said.sampled:
        return None
    steps, ranges = steps_table(report, source), ranges_table(report)
    query = f"""
        SELECT DISTINCT s.pid, s.step
        FROM {ranges} r ASOF JOIN {steps} s ON s.pid = r.pid AND r.start_ns >= s.start_ns
        WHERE r.source = 'torch' AND r.category = 'forward' AND r.start_ns < s.stop_ns"""
    return temp_table(report, f"{RANGED_STEPS}_{source.kind}", query)


def ranged_ops_sql(report: Report, source: StepSource) -> str | None:
    """SQL of the ``op_id`` of the operations launched in steps that have a module range, where module
    ranges were sampled and steps are known; None where every operation counts."""
    ranged = _ranged_steps(report, source)
    if ranged is None:
        return None
    query = f"SELECT o.op_id FROM {op_steps_table(report, source)} o JOIN {ranged} USING (pid, step)"
    return f"SELECT op_id FROM {temp_table(report, f'{RANGED_OPS}_{source.kind}', query)}"


def ranged_step_counts(report: Report, source: StepSource) -> pd.Series | None:
    """Per ``pid``, the number of steps that have a module range, where module ranges were sampled and
    steps are known; None where every step has them."""
    ranged = _ranged_steps(report, source)
    if ranged is None:
        return None
    frame = report.df(f"SELECT pid, count(*) AS n FROM {ranged} GROUP BY pid")
    return frame.set_index("pid")["n"]
